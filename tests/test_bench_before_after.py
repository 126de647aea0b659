"""The before/after bench (bench/diagnostics/before_after.py) interleaves the two trees with the
side that goes first alternating, pairs the ratio by round with a t-interval on the log ratios, and
flags runs that did not do the same work or did not reproduce the same-seed figures. Its pure parts
only: no model runs here."""

import math
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


ba = load_script("bench/diagnostics/before_after.py")
workloads = load_script("bench/diagnostics/before_after_workloads.py")


def test_rounds_alternate_which_side_goes_first_with_each_workloads_pair_back_to_back():
    order = ba.schedule(["sft", "eval"], 3)
    assert order == [
        (0, "sft", "before"), (0, "sft", "after"), (0, "eval", "before"), (0, "eval", "after"),
        (1, "sft", "after"), (1, "sft", "before"), (1, "eval", "after"), (1, "eval", "before"),
        (2, "sft", "before"), (2, "sft", "after"), (2, "eval", "before"), (2, "eval", "after"),
    ]  # fmt: skip
    five = ba.schedule(["grpo"], 5)
    assert [side for _, _, side in five].count("before") == 5
    assert [five[2 * r][2] for r in range(5)] == ["before", "after", "before", "after", "before"]


def test_ratio_is_the_geometric_mean_of_round_ratios_with_a_t_interval_on_their_logs():
    # Rounds give after/before = 1.1, 1.21, 1.0: log ratios a, 2a, 0 with a = ln 1.1. Their mean is a
    # (ratio 1.1), their sd (ddof 1) is a, and Student t with 2 degrees of freedom at 97.5% is
    # 4.302653, so the interval is exp(a -+ 4.302653 * a / sqrt(3)) = [0.86810, 1.39386].
    r = ba.paired_ratio([100.0, 50.0, 80.0], [110.0, 60.5, 80.0])
    a = math.log(1.1)
    half = 4.302653 * a / math.sqrt(3)
    assert r["ratio"] == pytest.approx(1.1)
    assert (r["low"], r["high"]) == (pytest.approx(math.exp(a - half), rel=1e-6), pytest.approx(math.exp(a + half)))
    assert (round(r["low"], 5), round(r["high"], 5)) == (0.8681, 1.39386)
    assert r["within_noise"] is True and r["per_round"] == pytest.approx([1.1, 1.21, 1.0])


def test_a_consistent_slowdown_is_outside_noise_and_one_round_has_no_interval():
    slower = ba.paired_ratio([10.0, 20.0, 30.0, 40.0, 50.0], [8.0, 16.2, 23.7, 32.1, 39.9])
    assert slower["high"] < 1.0 and slower["within_noise"] is False
    one = ba.paired_ratio([10.0], [12.0])
    assert one["ratio"] == pytest.approx(1.2) and (one["low"], one["high"], one["within_noise"]) == (None, None, None)
    with pytest.raises(ValueError, match="paired rounds"):
        ba.paired_ratio([1.0, 2.0], [1.0])


def _run(side: str, tokens: int, loss: float) -> dict:
    return {"side": side, "work": {"steps": 3, "tokens": tokens}, "reproduced": {"final_loss": loss}}


def test_same_work_and_same_seed_figures_are_checked_across_sides():
    same = ba.same_work([_run("before", 900, 2.5), _run("after", 900, 2.5)])
    assert same["same_work"] is True and same["final_loss"] == {"equal": True, "before": 2.5, "after": 2.5}
    differs = ba.same_work([_run("before", 900, 2.5), _run("after", 880, 2.75)])
    assert differs["same_work"] is False
    assert differs["final_loss"]["equal"] is False and differs["final_loss"]["max_abs_diff"] == pytest.approx(0.25)


def test_training_figures_leave_out_the_first_step_and_count_the_time_between_steps(tmp_path):
    rows = [
        '{"time": 100.0, "step": 1, "loss": 3.0, "real_tokens": 500, "step_s": 9.0}',
        '{"time": 100.5, "event": "eval", "step": 1}',
        '{"time": 102.0, "step": 2, "loss": 2.9, "real_tokens": 300, "step_s": 1.5}',
        '{"time": 104.0, "step": 3, "loss": 2.8, "real_tokens": 500, "step_s": 1.5}',
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    records = workloads.step_records(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3]
    rate = workloads.after_first_step(records, "real_tokens")
    # steps 2 and 3: 800 tokens over 4 s of wall time (step 1's record to step 3's), 3 s of step clocks
    assert rate == {"work": 800, "wall_s": 4.0, "per_wall_s": 200.0, "per_step_s": pytest.approx(800 / 3)}
    with pytest.raises(ValueError, match="warm-up"):
        workloads.after_first_step(records[:1], "real_tokens")


def test_the_eval_text_hash_ignores_row_order_and_sees_one_changed_completion():
    rows = [
        {"suite": "s", "task_id": f"t{i}", "template": 0, "seed": 0, "sample": j, "completion": f"{i + j}"}
        for i in range(3)
        for j in range(2)
    ]
    same = workloads.completions_hash(list(reversed(rows)))
    assert workloads.completions_hash(rows) == same
    changed = [dict(r) for r in rows]
    changed[4]["completion"] = "other"
    assert workloads.completions_hash(changed) != same
