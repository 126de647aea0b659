"""`temper eval run` records the eval in the registry (as the pipeline's eval stage does, through
the same `evaluate_config`), so `temper lineage` lists it with the checkpoint's evals."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.runs import REGISTRY_ENV
from tempering.runs.registry import Registry
from tests.conftest import tiny_llama


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.config.pad_token_id = smol_tokenizer.pad_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def test_a_standalone_eval_is_recorded_in_the_project_registry(tmp_path, tiny_dir, monkeypatch):
    monkeypatch.delenv(REGISTRY_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["init"]).exit_code == 0
    tasks = tmp_path / "dates.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "prompt": f"2024-01-0{i}?", "verifier": {"type": "exact", "answer": "x"}}) + "\n"
            for i in range(1, 4)
        )
    )
    suite = tmp_path / "dates.yaml"
    suite.write_text(f"name: dates\ntasks: {{source: {tasks}}}\nsampling: {{max_new_tokens: 2, temperature: 0}}\n")
    res = CliRunner().invoke(
        app, ["eval", "run", str(suite), "--model", str(tiny_dir), "--out", str(tmp_path / "ev"), "--no-cache"]
    )
    assert res.exit_code == 0, res.output
    assert f"recorded in {tmp_path / '.tempering' / 'registry.sqlite'}" in res.stderr
    with Registry(tmp_path / ".tempering" / "registry.sqlite") as reg:
        evals = reg.evals(model=tiny_dir)
    assert len(evals) == 1 and evals[0]["metrics"] == {"dates": {"accuracy": 0.0}}
    assert evals[0]["report"] == str((tmp_path / "ev" / "results.json").resolve())
