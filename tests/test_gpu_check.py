"""The GPU check (bench/gpu/run.sh): its step runner records every outcome and keeps each step in
its time box, and `--cpu-dry-run` runs every step on the CPU with tiny sizes, so the script cannot
rot between the rare windows when a GPU is lent."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu" / "check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_step_past_its_time_box_is_killed_with_its_children_and_recorded(tmp_path, monkeypatch):
    check = load_check()
    monkeypatch.setattr(check, "MIN_STEP_S", 0)
    started, marker = tmp_path / "grandchild_started", tmp_path / "grandchild_outlived_the_kill"
    # The step starts a grandchild that would write `marker` 4 s later: killing the group stops it too.
    grandchild = f"import time; time.sleep(4); open({str(marker)!r}, 'w').write('x')"
    argv = [
        "-c",
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); "
        f"open({str(started)!r}, 'w').write('x'); time.sleep(60)",
    ]
    with (tmp_path / "log").open("w") as log:
        outcome = check.run_step(check.Step("sleeper", argv, 60), 3.0, log)
    assert outcome["status"] == "timeout" and outcome["time_box_s"] == 3.0
    assert started.exists()
    time.sleep(4.5)
    assert not marker.exists()


def test_a_failing_step_is_recorded_with_its_output(tmp_path):
    check = load_check()
    step = check.Step("fails", ["-c", "import sys; print('what went wrong'); sys.exit(3)"], 30)
    with (tmp_path / "log").open("w") as log:
        outcome = check.run_step(step, 30, log)
    assert outcome["status"] == "failed" and outcome["rc"] == 3 and "what went wrong" in outcome["log_tail"]
    assert "what went wrong" in (tmp_path / "log").read_text()


def test_a_skipped_step_and_a_spent_budget_are_recorded_not_run(tmp_path):
    check = load_check()
    with (tmp_path / "log").open("w") as log:
        skipped = check.run_step(check.Step("ray", [], 0, skip_reason="not installed"), 30, log)
        late = check.run_step(check.Step("late", ["-c", "raise SystemExit(1)"], 30), 2, log)
    assert skipped == {"status": "skipped", "reason": "not installed"}
    assert late["status"] == "skipped" and "budget" in late["reason"]


def test_pytest_with_no_gpu_marked_test_fails_the_step(tmp_path):
    check = load_check()
    assert check.judge_pytest({"status": "failed", "rc": 5}, tmp_path)["reason"] == "no test carries the gpu marker"
    (tmp_path / "pytest_gpu.xml").write_text(
        '<testsuites><testsuite tests="5" failures="1" errors="0" skipped="3"></testsuite></testsuites>'
    )
    counts = check.judge_pytest({"status": "failed", "rc": 1}, tmp_path)["counts"]
    assert counts == {"tests": 5, "failures": 1, "errors": 0, "skipped": 3, "passed": 1}


@pytest.mark.slow
def test_the_cpu_dry_run_passes_every_step(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu" / "run.sh"), "--cpu-dry-run", "--wheels", str(tmp_path / "none"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3700,
    )
    report = json.loads((out / "gpu_cpu_dry_run.json").read_text())
    tails = {n: s.get("log_tail", "")[-1500:] for n, s in report["steps"].items() if s["status"] != "ok"}
    assert proc.returncode == 0, tails
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    ran = ["prepare_models", "pytest_gpu", "sft_large", "sft_default", "grpo", "decode", "torchrun"]
    assert summary["steps"] == {**dict.fromkeys(ran, "ok"), "ray_engine_replica": "skipped"}, tails
    steps = report["steps"]
    assert steps["pytest_gpu"]["counts"]["tests"] >= 1 and steps["pytest_gpu"]["counts"]["failures"] == 0
    for name in ("sft_large", "sft_default"):
        runs = steps[name]["result"]["runs"]
        assert runs["tempering"]["real_tokens"] > 0 and runs["trl"]["real_tokens"] > 0
    grpo = steps["grpo"]["result"]["runs"]
    assert {"tempering", "tempering_full", "trl"} <= set(grpo) and all(
        r["completions_per_s"] > 0 for r in grpo.values()
    )
    assert set(steps["decode"]["result"]["runs"]["batching_engine"]) == {"1", "2", "4"}
    torchrun = steps["torchrun"]["result"]
    assert len(torchrun["sft_under_torchrun"]["losses"]) == 2 and torchrun["collective"]["backend"] == "gloo"


def test_the_dry_run_passes_each_bench_the_flags_the_gpu_run_passes(tmp_path):
    check = load_check()
    gpu, cpu = check.steps("gpu", tmp_path, None), check.steps("cpu", tmp_path, None)
    assert [s.name for s in gpu] == [s.name for s in cpu]
    for g, c in zip(gpu, cpu):
        assert [a for a in g.argv if a.startswith("-")] == [a for a in c.argv if a.startswith("-")], g.name
