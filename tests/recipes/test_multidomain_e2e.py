"""`temper grpo` over a domain mixture on a tiny model: per-domain metrics and plot, the schedule
shifting away from a mastered domain, an exact resume after a real `kill -9`, and bad mixtures refused."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tests.test_cli_errors import one_line_error

# What a random tiny model's replies pass: any character (mastered), an "m" (about half of them), never.
PATTERNS = {"mastered": ".", "some": "m", "hopeless": "QQQ#never#QQQ"}


def _task_file(path, domain, n):
    spec = {"type": "regex", "pattern": PATTERNS.get(domain, "."), "on": "completion"}
    rows = [{"id": f"t{i}", "prompt": f"{domain}: say something about {i}", "verifier": spec} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _config(tmp_path, model_dir, steps, heldout=True, group_size=8, **overrides):
    cfg = {
        "model": str(model_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "domains": [
            {"name": name, "tasks": {"source": _task_file(tmp_path / f"{name}.jsonl", name, 20)}} for name in PATTERNS
        ],
        "mixture": {"floor": 0.1, "smoothing": 1.0},
        "heldout": {"split_size": 6, "max_new_tokens": 4} if heldout else None,
        "grpo": {
            "prompts_per_step": 3,
            "group_size": group_size,  # 8: "some" ties (all 8 alike) in ~1% of first batches
            "max_new_tokens": 5,
            "max_refills": 0,
            "truncation": "keep",
            "advantage": "per_domain",
        },
        "train": {
            "steps": steps,
            **({"eval_every": 100} if heldout else {}),
            "precision": "fp32",
            "optim": {"lr": 1e-3},
            "checkpoint": {"every": 2},
        },
        "out": str(tmp_path / "runs"),
        "name": "md",
        **overrides,
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _steps(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"reward_mean"' in line]


def test_a_mixture_logs_every_domain_and_moves_draws_off_the_mastered_one(tmp_path, tiny_dir):
    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, tiny_dir, 3))])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "md"
    steps = _steps(run)
    for name in PATTERNS:  # the schedule every step; sample figures on the steps that drew the domain
        assert all(f"domain/{name}/{key}" in s for s in steps for key in ("share", "pass_rate_ema", "paused"))
        drew = [s for s in steps if f"domain/{name}/samples" in s]
        for key in ("reward", "success", "failure_rate", "tokens", "sample_cost_s", "groups_kept"):
            assert drew and all(f"domain/{name}/{key}" in s for s in drew), (name, key)
    assert steps[0]["domain/mastered/success"] == 1.0 and steps[0]["domain/hopeless/success"] == 0.0
    # after the first batch: mastered and hopeless sit at the floor, the learnable one takes the rest
    assert steps[0]["domain/mastered/share"] == pytest.approx(0.1) == steps[0]["domain/hopeless/share"]
    assert steps[0]["domain/some/share"] == pytest.approx(0.8)
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["domains"]) == set(PATTERNS) and summary["domains"]["mastered"]["pass_rate"] == 1.0
    after = summary["heldout_after"]
    assert after["domain/mastered/accuracy"] == 1.0 and after["domain/hopeless/accuracy"] == 0.0
    assert (run / "domains.png").stat().st_size > 1000
    split = json.loads((run / "heldout" / "split.json").read_text())
    assert {d: v["heldout"] for d, v in split["domains"].items()} == {"mastered": 2, "some": 2, "hopeless": 2}


def test_the_schedule_resumes_exactly_after_kill_9(tmp_path, tiny_dir):
    args = ["--set", "train.steps=6"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    straight = _config(tmp_path / "a", tiny_dir, 6, heldout=False, group_size=4)
    res = CliRunner().invoke(app, ["grpo", str(straight), *args])
    assert res.exit_code == 0, res.output
    killed = _config(tmp_path / "b", tiny_dir, 6, heldout=False, group_size=4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tempering.cli", "grpo", str(killed), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    target = tmp_path / "b" / "runs" / "md" / "checkpoints" / "step-00000004"
    deadline = time.time() + 300
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # really killed mid-run
    res = CliRunner().invoke(app, ["grpo", str(killed), *args])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "b" / "runs" / "md" / "summary.json").read_text())
    assert summary["resumed_from"] is not None and 4 <= summary["resumed_from"] < 6

    def schedule(root):
        steps = {r["step"]: r for r in _steps(root / "runs" / "md")}  # a redone step's last record counts
        return [[steps[s][f"domain/{n}/share"] for n in PATTERNS] for s in sorted(steps)]

    def drawn(root):
        lines = (root / "runs" / "md" / "consumed.jsonl").read_text().splitlines()
        return [json.loads(line)["ids"] for line in lines]

    assert schedule(tmp_path / "a") == schedule(tmp_path / "b") and len(schedule(tmp_path / "a")) == 6
    assert drawn(tmp_path / "a") == drawn(tmp_path / "b")


def test_bad_mixtures_are_one_line_errors_before_any_work(tmp_path, tiny_dir):
    def error(**overrides):
        path = _config(tmp_path, tiny_dir, 1, **overrides)
        line = one_line_error(CliRunner().invoke(app, ["grpo", str(path)]))
        assert not (tmp_path / "runs").exists()  # nothing recorded, nothing trained
        return line

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    one = {"name": "mastered", "tasks": {"source": _task_file(tmp_path / "m.jsonl", "mastered", 5)}}
    line = error(domains=[one, {"name": "nothing", "tasks": {"source": str(empty)}}])
    assert "domains[1] (nothing): no tasks" in line
    line = error(domains=[{**one, "weight": 0}, {"name": "b", "tasks": one["tasks"], "weight": 0}])
    assert "weights sum to 0" in line
    line = error(domains=[one, {"name": "ghost", "tasks": {"source": "nowhere:thing"}}])
    assert "domains[1] (ghost)" in line and "'nowhere:thing'" in line and "not a registered source" in line
    line = error(domains=[one, {"name": "rg", "tasks": {"source": "reasoning_gym:no_such_set", "n": 2}}])
    assert "domains[1] (rg)" in line and "'no_such_set' not registered" in line
    line = error(domains=[one, {**one}])
    assert "'mastered' is used twice" in line
    line = error(tasks={"source": "builtin:arithmetic"})
    assert "tasks: does nothing with domains:" in line
