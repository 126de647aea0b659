"""Bench experiments compute intervals the way evals do (`tempering.evals.stats`): no private
bootstrap or t-table in bench/, agent RL gains bootstrapped over tasks, not (seed, task) units, and
the task-level agent figures in the results are what bench/experiments/agent_rl_tasklevel.py derives."""

import json
import re
from pathlib import Path

import pytest

from tempering.evals.stats import paired_bootstrap
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
# The fingerprints of an interval computed by hand: a table of t or z quantiles, the 2.5% / 97.5%
# tails of sorted resamples.
PRIVATE_INTERVAL = re.compile(r"\b(12\.706|4\.303|3\.182|2\.776|1\.96)\b|\b0\.025\b|\b0\.975\b|2\.5, 97\.5")


def private_intervals(files) -> list[str]:
    return [
        f"{path}:{n}"
        for path in files
        for n, line in enumerate(Path(path).read_text().splitlines(), 1)
        if PRIVATE_INTERVAL.search(line)
    ]


def test_bench_holds_no_interval_of_its_own():
    assert private_intervals(sorted((ROOT / "bench").rglob("*.py"))) == []


def test_a_hand_written_interval_is_caught(tmp_path):
    planted = tmp_path / "x.py"
    planted.write_text("means.sort()\nlow = means[int(0.025 * n)]\nhalf = 4.303 * sd\nok = 0.0255\n")
    assert private_intervals([planted]) == [f"{planted}:2", f"{planted}:3"]


def test_agent_rl_gain_resamples_tasks_not_seed_task_units():
    # The tool-arithmetic headline's shape: RL passes every (seed, task); SFT fails 4 of 14 tasks on
    # seeds 1 and 2 (here the same 4). Per task: 4 tasks gain 2/3, 10 gain 0.
    paired = load_script("bench/experiments/agent_rl.py").paired
    units = {(s, f"t{i}"): (0.0 if s and i < 4 else 1.0, 1.0) for s in range(3) for i in range(14)}
    g = paired(units)
    expected = paired_bootstrap([[1.0, 0.0, 0.0]] * 4 + [[1.0] * 3] * 10, [[1.0] * 3] * 14, resamples=4000)
    assert (g["n"], g["units"], g["unit"]) == (14, 42, "task")
    assert g["delta"] == pytest.approx(8 / 42)
    assert (g["ci_low"], g["ci_high"]) == (expected.low, expected.high)


def test_recovery_rate_resamples_tasks():
    # two tasks on two seeds; every episode errs; task a recovers on both seeds after, task b never:
    # rate 0 -> 0.5. A resample of tasks gives 0 (b, b), 0.5 (a, b) or 1 (a, a).
    rd = load_script("bench/experiments/agent_rl.py").recovery_delta
    ep = lambda ok: {"errors": 1, "success": ok}  # noqa: E731
    parts = [
        {"seed": s, "phases": {"x": {"a": ep(False), "b": ep(False)}, "y": {"a": ep(True), "b": ep(False)}}}
        for s in (0, 1)
    ]
    r = rd(parts, "x", "y")
    assert (r["delta"], r["ci_low"], r["ci_high"], r["tasks"], r["units"]) == (0.5, 0.0, 1.0, 2, 4)


def test_gale_ryser_arrangements_by_hand():
    tl = load_script("bench/experiments/agent_rl_tasklevel.py")
    # seeds moving 0, 4, 4 units up on 14 tasks: 0-4 tasks moved on both seeds
    found = [c for c in tl.count_vectors(8, 8, 3) if tl.realizable(c, [0, 4, 4])]
    assert sorted(found) == sorted([(2, 2, 2, 2, 0, 0, 0, 0), (2, 2, 2, 1, 1, 0, 0, 0), (2, 2, 1, 1, 1, 1, 0, 0),
                                    (2, 1, 1, 1, 1, 1, 1, 0), (1,) * 8])  # fmt: skip
    assert not tl.realizable((3, 1), [0, 4, 4])  # a task cannot move on all 3 seeds when one moved none


def test_stored_task_level_agent_figures_are_the_derived_ones():
    tl = load_script("bench/experiments/agent_rl_tasklevel.py")
    load = lambda name: json.loads((ROOT / "bench" / "results" / name).read_text())  # noqa: E731
    stored = load("agent_rl_tool_arith.json")["task_level"]
    derived = json.loads(json.dumps(tl.tool_arith(stored)))
    assert {k: stored[k] for k in derived} == derived
    head = stored["credit.trajectory"]
    assert head["n"] == 14 and head["delta"] == pytest.approx(8 / 42)
    assert load("agent_rl_tool_arith.json")["superseded"]["credit.trajectory"].startswith("bootstrapped (seed, task)")
