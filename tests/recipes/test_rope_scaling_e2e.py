"""`rope_scaling:` in a training config: applied at load, carried by `final/` and `temper export`.

The checks compare logits at 900 positions (past the tiny model's native window of 512, where
the scaling changes the rotary angles) with the scaled model built directly: the base loaded by
plain transformers, `scale_rope` applied, then the trained adapter (or weights) on top.
"""

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import RopeScaling
from tempering.data.builtin import arithmetic_conversations
from tempering.models.rope import ROPE_RECORD, context_window, rope_summary, scale_rope
from tempering.runs.registry import Registry

YARN_X2 = {"type": "yarn", "factor": 2.0}
IDS = torch.randint(3, 5000, (1, 900), generator=torch.Generator().manual_seed(0))


def train(tmp_path: Path, tiny_dir: Path, lora: dict | None, name: str) -> Path:
    """Two SFT steps of `tiny_dir` under rope_scaling yarn x2; returns the run's `final` dir."""
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(8, 1)))
    cfg = {
        "model": str(tiny_dir),
        "lora": lora,
        "rope_scaling": YARN_X2,
        "data": {"train": str(rows), "max_length": 128},
        "train": {
            "steps": 2,
            "batch_size": 4,
            "precision": "fp32",
            "optim": {"lr": 1e-2, "warmup_steps": 0},
            "checkpoint": {"every": 2},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["sft", str(path), "--name", name])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return tmp_path / "runs" / name / "final"


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(IDS).logits[0, 600:]  # positions past the native 512 only


def test_a_lora_adapter_trained_under_rope_scaling_loads_scaled_through_tempering_and_its_export(
    tmp_path, tiny_dir, monkeypatch
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tempering.models.load import load_model

    final = train(tmp_path, tiny_dir, {"r": 4, "alpha": 8}, "lora")
    assert json.loads((final / ROPE_RECORD).read_text()) == YARN_X2  # the adapter's base is unscaled
    recorded = Registry(tmp_path / "runs" / "registry.sqlite").get("lora")["config"]["rope_scaling"]
    assert {k: v for k, v in recorded.items() if v is not None} == YARN_X2  # lineage: the run's config
    direct_base = scale_rope(AutoModelForCausalLM.from_pretrained(tiny_dir), RopeScaling(**YARN_X2))
    direct = logits(PeftModel.from_pretrained(direct_base, str(final)))

    loaded = load_model(str(final))
    assert context_window(loaded.config) == 1024
    assert torch.allclose(logits(loaded), direct, atol=1e-6, rtol=0)
    unscaled = logits(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), str(final)))
    # the random tiny model barely reads positions: without the record the logits move by ~1e-3
    assert (unscaled - direct).abs().max() > 1e-4
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))  # where the checkpoint is rebuilt
    checkpoint = load_model(f"{tmp_path / 'runs' / 'lora'}@step-2")  # the last step's checkpoint = final
    assert torch.allclose(logits(checkpoint), direct, atol=1e-6, rtol=0)

    res = CliRunner().invoke(app, ["export", str(final), "--out", str(tmp_path / "merged")])
    assert res.exit_code == 0, res.output
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")  # plain transformers
    assert rope_summary(exported.config)["rope_type"] == "yarn" and context_window(exported.config) == 1024
    assert torch.allclose(logits(exported), direct, atol=1e-5, rtol=0)  # merged: the adapter's sums folded in
    assert not (tmp_path / "merged" / ROPE_RECORD).exists()  # its config.json carries the scaling
    assert rope_summary(load_model(str(tmp_path / "merged")).config)["factor"] == 2.0  # and is not scaled twice


def test_full_parameter_training_under_rope_scaling_saves_the_scaled_config(tmp_path, tiny_dir):
    from transformers import AutoModelForCausalLM

    from tempering.models.load import load_model

    final = train(tmp_path, tiny_dir, None, "full")
    assert not (final / ROPE_RECORD).exists()
    plain = AutoModelForCausalLM.from_pretrained(final)
    params = json.loads((final / "config.json").read_text())["rope_parameters"]
    assert (
        params["rope_type"] == "yarn" and params["factor"] == 2.0 and params["original_max_position_embeddings"] == 512
    )
    assert torch.allclose(logits(load_model(str(final))), logits(plain), atol=1e-6, rtol=0)


def test_rope_scaling_on_an_already_scaled_model_is_a_one_line_error(tmp_path, tiny_dir):
    from tempering.models.load import load_model
    from tempering.models.rope import RopeScalingError

    scaled = tmp_path / "scaled"
    load_model(str(tiny_dir), rope_scaling=RopeScaling(**YARN_X2)).save_pretrained(scaled)
    with pytest.raises(RopeScalingError) as err:
        load_model(str(scaled), rope_scaling=RopeScaling(type="linear", factor=2.0))
    assert "\n" not in str(err.value) and "already scaled" in str(err.value)
