"""`temper grpo` end to end on a tiny model: metrics, trajectories, held-out curve, resume."""

import json

import pytest
import torch
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


def _run_grpo(tmp_path, tiny_dir, name):
    path = _config(tmp_path, tiny_dir, 3)
    cfg = yaml.safe_load(path.read_text())
    del cfg["heldout"]
    cfg["name"] = name
    # a reward the random tiny model earns now and then (its replies are random words), so groups differ
    letter = {"type": "regex", "pattern": "[kK]", "on": "completion"}
    cfg["reward"] = [{"name": "letter", "weight": 1.0, "verifier": letter}]
    cfg["grpo"]["truncation"] = "keep"  # its replies all run to max_new_tokens
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(path)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / name
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, [r for r in steps if "loss" in r]


def test_a_synchronous_grpo_run_stamps_versions_is_never_stale_and_trains_as_without_them(
    tmp_path, tiny_dir, monkeypatch
):
    from safetensors.torch import load_file

    from tempering.rollout.source import RolloutSource
    from tempering.rollout.store import read_trajectories

    run, steps = _run_grpo(tmp_path, tiny_dir, "versions")
    # the weights move (a policy-gradient loss at ratio 1 is 0 here, its gradient is not)
    assert [r["step"] for r in steps] == [1, 2, 3] and all(r["grad_norm"] > 0 for r in steps)
    for r in steps:  # the sampler holds the weights being updated: every sampled token is 0 steps old
        assert (r["staleness_mean"], r["staleness_max"]) == (0.0, 0.0) and r["staleness_hist/0"] > 0
        assert not [k for k in r if k.startswith("staleness_hist/") and k != "staleness_hist/0"]
        assert (r["stale_dropped_groups"], r["stale_dropped_share"]) == (0.0, 0.0)  # the bound never trips
    for step in (1, 2, 3):  # sampled after step - 1 updates, so under weights version step - 1
        rows = read_trajectories(run, step=step)
        assert rows and all(r["versions"] == [step - 1] * len(r["tokens"]) for r in rows)

    # the same run with versions neither stamped nor heard: the same losses and weights, bit for bit
    monkeypatch.setattr("tempering.rollout.source.stamp", lambda mask, version: None)
    monkeypatch.delattr(RolloutSource, "on_weights")
    plain, plain_steps = _run_grpo(tmp_path, tiny_dir, "plain")
    assert not [k for r in plain_steps for k in r if k.startswith("staleness_")]
    assert all(r["versions"] is None for r in read_trajectories(plain))
    for key in ("loss", "grad_norm", "reward_mean", "kl"):
        assert [r[key] for r in plain_steps] == [r[key] for r in steps], key
    a, b = (load_file(r / "final" / "adapter_model.safetensors") for r in (run, plain))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_one_step_off_policy_trains_one_step_stale_and_drops_nothing(tmp_path, tiny_dir):
    """`max_off_policy_steps: 1` on Ray engine replicas: after the first batch every batch was sampled
    ahead, one step behind the weights it trains (staleness 1), and the bound never drops a group."""
    pytest.importorskip("ray")
    path = _config(tmp_path, tiny_dir, 3)
    cfg = yaml.safe_load(path.read_text())
    del cfg["heldout"]
    cfg["grpo"] |= {"max_off_policy_steps": 1, "dynamic_sampling": False, "truncation": "keep"}
    cfg["scale"] = {"reward_workers": 1, "engine_replicas": 1, "num_cpus": 2}
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(path)])
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "runs" / "g" / "metrics.jsonl").read_text().splitlines()
    steps = [r for r in map(json.loads, lines) if "loss" in r]
    assert [(r["step"], r["staleness_max"]) for r in steps] == [(1, 0.0), (2, 1.0), (3, 1.0)]
    assert all(r["staleness_hist/1"] > 0 and "staleness_hist/0" not in r for r in steps[1:])
    assert all((r["stale_dropped_groups"], r["stale_dropped_share"]) == (0.0, 0.0) for r in steps)
