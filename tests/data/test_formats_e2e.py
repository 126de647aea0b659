"""A saved Hugging Face dataset in a non-`messages` format trains through `temper sft`."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tempering.runs.registry import Registry
from tests.conftest import tiny_llama


def test_sft_trains_on_a_saved_sharegpt_dataset_dir(tmp_path, smol_tokenizer):
    datasets = pytest.importorskip("datasets")
    tiny = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(tiny)
    smol_tokenizer.save_pretrained(tiny)
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    rows = [
        {"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in c["messages"]]}
        for c in arithmetic_conversations(16, 1)
    ]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "model": str(tiny),
                "lora": None,
                "data": {"train": "ds", "max_length": 128},
                "train": {"steps": 2, "batch_size": 4, "precision": "fp32"},
                "out": str(tmp_path / "runs"),
                "name": "hf",
            }
        )
    )
    res = CliRunner().invoke(app, ["sft", str(cfg)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    summary = json.loads(res.stdout[res.stdout.index("{") :])
    assert summary["data"]["rows"] == 16 and summary["data"]["valid"] == 16 and summary["steps"] == 2
    inputs = Registry(tmp_path / "runs" / "registry.sqlite").get("hf")["inputs"]
    assert list(inputs) == [str(tmp_path / "ds")] and len(inputs[str(tmp_path / "ds")]) == 64  # dir hashed
