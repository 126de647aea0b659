"""The GPU check (bench/gpu/run.sh): its step runner records every outcome and keeps each step in
its time box, and `--cpu-dry-run` runs every step on the CPU with tiny sizes, so the script cannot
rot between the rare windows when a GPU is lent."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_a_step_past_its_time_box_is_killed_with_its_children_and_recorded(tmp_path, monkeypatch):
    check = load_script("bench/gpu/check.py", "gpu_check")
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
    check = load_script("bench/gpu/check.py", "gpu_check")
    step = check.Step("fails", ["-c", "import sys; print('what went wrong'); sys.exit(3)"], 30)
    with (tmp_path / "log").open("w") as log:
        outcome = check.run_step(step, 30, log)
    assert outcome["status"] == "failed" and outcome["rc"] == 3 and "what went wrong" in outcome["log_tail"]
    assert "what went wrong" in (tmp_path / "log").read_text()


def test_a_skipped_step_and_a_spent_budget_are_recorded_not_run(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    with (tmp_path / "log").open("w") as log:
        skipped = check.run_step(check.Step("ray", [], 0, skip_reason="not installed"), 30, log)
        late = check.run_step(check.Step("late", ["-c", "raise SystemExit(1)"], 30), 2, log)
    assert skipped == {"status": "skipped", "reason": "not installed"}
    assert late["status"] == "skipped" and "budget" in late["reason"]


def test_pytest_with_no_gpu_marked_test_fails_the_step(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
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
    check = load_script("bench/gpu/check.py", "gpu_check")
    # every step of every call runs; only those that cannot run anywhere without their package skip
    skipped = {"ray_engine_replica", "unsloth_peer"} | ({"decode_graphs"} if check.graphs_option_missing() else set())
    assert summary["steps"] == {n: "skipped" if n in skipped else "ok" for n, _, _ in check.PLAN}, tails
    steps = report["steps"]
    assert steps["pytest_gpu"]["counts"]["tests"] >= 1 and steps["pytest_gpu"]["counts"]["failures"] == 0
    sides = {"sft_large": ("tempering", "trl"), "sft_xl": ("tempering_ckpt", "trl_ckpt")}
    sides |= {"sft_compiled": ("tempering", "trl_padded"), "sft_default": ("tempering", "trl")}
    for name, (ours, theirs) in sides.items():
        runs = steps[name]["result"]["runs"]
        assert runs[ours]["real_tokens"] > 0 and runs[theirs]["real_tokens"] > 0, name
    # the GPU-only TRL settings are recorded as skipped with their reason, not lost
    assert steps["sft_large"]["result"]["not_run"]["trl_liger"] == {"skipped": "needs a CUDA GPU"}
    assert steps["sft_xl"]["result"]["runs"]["tempering_ckpt"]["settings"]["gradient_checkpointing"] is True
    for name in ("grpo", "grpo_long"):
        grpo = steps[name]["result"]["runs"]
        assert set(grpo) == {"tempering", "trl"} and all(r["completions_per_s"] > 0 for r in grpo.values())
    assert set(steps["decode"]["result"]["runs"]["batching_engine"]) == {"1", "2", "4"}
    torchrun = steps["torchrun"]["result"]
    assert len(torchrun["sft_under_torchrun"]["losses"]) == 2 and torchrun["collective"]["backend"] == "gloo"


def test_the_dry_run_passes_each_bench_the_flags_the_gpu_run_passes(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    gpu, cpu = check.steps("gpu", tmp_path, None), check.steps("cpu", tmp_path, None)
    assert [s.name for s in gpu] == [s.name for s in cpu]
    for g, c in zip(gpu, cpu):
        assert [a for a in g.argv if a.startswith("-")] == [a for a in c.argv if a.startswith("-")], g.name


def plan_table() -> list[tuple[str, int, int]]:
    """(step, call, box) of each row of bench/gpu/PLAN.md's table; call "every" is 0."""
    rows = []
    for line in (ROOT / "bench" / "gpu" / "PLAN.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows.append((cells[1].strip("`"), 0 if cells[2] == "every" else int(cells[2]), int(cells[3])))
    return rows


def test_the_written_plan_is_the_order_calls_and_boxes_the_check_runs(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    assert plan_table() == check.PLAN
    gpu = check.steps("gpu", tmp_path, None)
    assert [(s.name, s.call, s.timeout_s) for s in gpu] == check.PLAN
    assert gpu[0].name == "prepare_models" and [s.name for s in gpu[1:3]] == ["pytest_gpu", "sft_large"]


def test_each_calls_time_boxes_fit_its_budget_inside_one_device_call():
    check = load_script("bench/gpu/check.py", "gpu_check")
    for call, budget in check.CALL_BUDGET_S.items():
        boxes = sum(box for _, c, box in check.PLAN if c in (0, call))
        assert boxes <= budget <= check.CALL_LIMIT_S, (call, boxes, budget)
    assert check.CALL_LIMIT_S <= 0.95 * 600  # a device call runs at most 600 s


def test_a_call_runs_its_own_steps_with_prepare_and_a_dry_run_runs_them_all(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    gpu = check.steps("gpu", tmp_path, None)
    call2 = [s.name for s in gpu if check.chosen(s, "gpu", 2, None)]
    assert call2 == ["prepare_models", "sft_xl", "grpo_long"]
    assert [s.name for s in gpu if check.chosen(s, "gpu", 1, "grpo")] == ["prepare_models", "grpo"]
    assert all(check.chosen(s, "cpu", 1, None) for s in check.steps("cpu", tmp_path, None))


def test_the_torchrun_steps_inner_limits_come_from_its_box(tmp_path):
    distributed = load_script("bench/gpu/distributed_check.py")
    check = load_script("bench/gpu/check.py", "gpu_check")
    [step] = [s for s in check.steps("gpu", tmp_path, None) if s.name == "torchrun"]
    budget = float(step.argv[step.argv.index("--budget") + 1])
    assert budget == step.timeout_s - 5 == 50
    assert distributed.split_budget(budget) == (50 - 50 / 3, 50 / 3)  # the SFT run gets two thirds
    assert distributed.split_budget(24) == (14, 10)  # the collective keeps at least 10 s


def test_the_gpu_tests_take_the_tokenizer_of_a_shape_prepare_models_writes(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    steps = {s.name: s for s in check.steps("gpu", tmp_path, None)}
    prepare = steps["prepare_models"].argv
    root, shapes = Path(prepare[1]), prepare[2:]
    tokenizer = Path(steps["pytest_gpu"].env["TEMPERING_TEST_TOKENIZER"])
    assert tokenizer.parent == root and tokenizer.name in shapes


def test_the_graphs_step_is_skipped_with_its_reason_exactly_when_inference_py_lacks_the_option(tmp_path):
    check = load_script("bench/gpu/check.py", "gpu_check")
    has_option = check.DECODE_GRAPHS_OPTION in (ROOT / "bench" / "throughput" / "inference.py").read_text()
    [step] = [s for s in check.steps("gpu", tmp_path, None) if s.name == "decode_graphs"]
    assert step.argv[step.argv.index("--cuda-graphs") + 1] == "on,off"
    if has_option:
        assert step.skip_reason is None
    else:
        assert step.skip_reason == "inference.py has no --cuda-graphs option"
