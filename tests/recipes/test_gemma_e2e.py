"""`temper sft` and `temper grpo` on a tiny random Gemma 3 (sliding-window and global layers, a
4-position window the chats run far past): training learns, and both engines sample what the
trainer scores."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tests.conftest import tiny_gemma


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny-gemma")
    model = tiny_gemma(vocab=len(smol_tokenizer), seed=5, window=4)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("lora", [None, {"r": 8, "alpha": 16}], ids=["full", "lora"])
def test_sft_on_gemma_learns(tmp_path, gemma_dir, lora):
    cfg = {
        "model": str(gemma_dir),
        "lora": lora,
        "data": {
            "train": _write(tmp_path / "train.jsonl", arithmetic_conversations(48, 1)),
            "eval": _write(tmp_path / "eval.jsonl", arithmetic_conversations(12, 1, "heldout")),
            "max_length": 160,
        },
        "train": {"steps": 8, "batch_size": 8, "precision": "fp32", "optim": {"lr": 3e-3, "warmup_steps": 1}},
        "out": str(tmp_path / "runs"),
    }
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["sft", str(tmp_path / "sft.yaml"), "--name", "g"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout[res.stdout.index("{") :])
    assert summary["eval_loss_after"] < summary["eval_loss_before"] - 0.2


@pytest.mark.parametrize("engine", ["batching", "hf"])
def test_a_grpo_step_on_gemma_samples_what_the_trainer_scores(tmp_path, gemma_dir, engine):
    cfg = {
        "model": str(gemma_dir),
        "lora": {"r": 4, "alpha": 8},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 16},
        "reward": [
            {"name": "digit", "weight": 1.0, "verifier": {"type": "regex", "pattern": "\\d", "on": "completion"}}
        ],
        "grpo": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, "truncation": "keep"},
        "engine": {"kind": engine},
        "train": {"steps": 1, "precision": "fp32", "optim": {"lr": 1e-3}},
        "out": str(tmp_path / "runs"),
        "name": "g",
    }
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(tmp_path / "grpo.yaml")])
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (tmp_path / "runs" / "g" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in records if "logprob_mismatch" in r][-1]
    # the prompts alone are ~30 tokens, the window 4: a sliding layer that saw the whole cache would disagree
    assert step["logprob_mismatch"] < 1e-4
