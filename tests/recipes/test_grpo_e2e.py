"""`temper grpo` end to end on a tiny model: metrics, trajectories, held-out curve, resume."""

import json

import yaml
from typer.testing import CliRunner

from tempering.cli import app


def _config(tmp_path, model_dir, steps):
    cfg = {
        "model": str(model_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 64},
        "heldout": {
            "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 6, "split": "heldout"},
            "max_new_tokens": 4,
        },
        # a reward the random tiny model earns sometimes: any digit in the reply
        "reward": [
            {"name": "correct", "weight": 1.0, "verifier": {"type": "numeric"}},
            {"name": "digit", "weight": 0.5, "verifier": {"type": "regex", "pattern": "\\d", "on": "completion"}},
        ],
        "grpo": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6, "max_refills": 1},
        "train": {
            "steps": steps,
            "eval_every": 2,
            "precision": "fp32",
            "optim": {"lr": 1e-3},
            "checkpoint": {"every": 2},
        },
        "out": str(tmp_path / "runs"),
        "name": "g",
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_grpo_runs_records_and_resumes(tmp_path, tiny_dir):
    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, tiny_dir, 2))])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "g"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and [h["step"] for h in summary["heldout_history"]] == [0, 2]
    assert {"reward", "correct", "digit", "truncation_rate"} <= set(summary["heldout_after"])
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward_mean" in r]
    for key in (
        "reward_mean",
        "reward_std",
        "accuracy",
        "zero_variance_share",
        "kl",
        "clip_fraction",
        "entropy",
        "response_len",
        "truncation_rate",
        "logprob_mismatch",
        "reward/builtin:arithadd/mean",
        "component/digit",
    ):
        assert key in steps[-1], key
    assert steps[-1]["logprob_mismatch"] < 1e-3  # engine and trainer agree on the sampled tokens
    assert sorted(p.name for p in (run / "trajectories").iterdir()) == ["step-000001.parquet", "step-000002.parquet"]
    assert (run / "curves.png").stat().st_size > 1000 and (run / "final" / "adapter_config.json").exists()

    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, tiny_dir, 4))])
    assert res.exit_code == 0, res.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from"] == 2 and summary["steps"] == 4
    assert len(list((run / "trajectories").iterdir())) == 4


def test_grpo_refuses_heldout_overlapping_training(tmp_path, tiny_dir):
    path = _config(tmp_path, tiny_dir, 1)
    cfg = yaml.safe_load(path.read_text())
    cfg["heldout"]["tasks"]["split"] = "train"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(path)])
    assert res.exit_code == 2 and "also appear in the training tasks" in " ".join(res.output.split())
