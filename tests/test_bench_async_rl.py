"""The async-vs-sync GRPO bench (bench/experiments/async_rl.py) reads a run's own metrics into its
clock, completions/s and time to held-out 0.5, and names its result's fields as the docs quote
them. Its pure parts only, on hand-made metric rows: no model runs here."""

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


bench = load_script("bench/experiments/async_rl.py")
ACC, WAIT = "heldout/tasks/correct", "heldout/tasks/eval_wait_s"


def _step(step, step_s, completions, hist, share=0.0):
    return {
        "time": 1000.0 + step,
        "step": step,
        "loss": 0.1,
        "step_s": step_s,
        "groups_kept": 2,
        "completions": completions,
        "stale_dropped_share": share,
        "staleness_max": float(max(hist)),
        **{f"staleness_hist/{k}": v for k, v in hist.items()},
    }


# group size 4, 2 groups kept a step. Step 3 dropped half its groups as stale; step 2 refilled (12 sampled).
ROWS = [
    {"time": 999.0, "event": "eval", "step": 0, ACC: 0.1, WAIT: 0.0},
    _step(1, 2.0, 8, {0: 16.0}),
    {"time": 1001.5, "event": "skip", "step": 1, "reason": "spike"},
    _step(2, 3.0, 12, {1: 16.0}),
    {"time": 1002.5, "event": "eval", "step": 2, ACC: 0.5, WAIT: 1.5},
    _step(3, 2.0, 8, {1: 8.0}, share=0.5),
    {"time": 1003.5, "event": "eval", "step": 3, ACC: 0.6, WAIT: 0.5},
]


def test_the_clock_is_the_step_times_plus_the_evals_waits_for_the_sampler_before_a_later_step():
    run = bench.read_run(ROWS, group_size=4)
    # step 1: 2.0; step 2: 5.0; step 3: 5.0 + 1.5 (step 2's eval waited for the batch) + 2.0. The wait
    # of the eval after the last step is after the clock stops.
    assert run["steps"] == 3
    assert run["clock_s"] == pytest.approx(8.5)
    assert [(p["step"], p["seconds"], p["accuracy"]) for p in run["heldout"]] == [
        (0, 0.0, 0.1),
        (2, 5.0, 0.5),
        (3, pytest.approx(8.5), 0.6),
    ]
    # trained: 2 x 4 + 2 x 4 + 2 x 4 x (1 - 0.5) = 20 completions; sampled 8 + 12 + 8 = 28
    assert run["completions_per_s"] == pytest.approx(20 / 8.5)
    assert run["sampled_completions_per_s"] == pytest.approx(28 / 8.5)
    assert run["eval_wait_s"] == pytest.approx(2.0)


def test_steps_and_seconds_to_the_threshold_are_the_first_eval_at_or_above_it_or_none():
    run = bench.read_run(ROWS, group_size=4)
    assert (run["steps_to_0_5"], run["seconds_to_0_5"]) == (2, 5.0)
    never = bench.read_run(ROWS, group_size=4, threshold=0.7)
    assert (never["steps_to_0_5"], never["seconds_to_0_5"]) == (None, None)


def test_staleness_histograms_per_step_and_summed_and_the_dropped_share():
    run = bench.read_run(ROWS, group_size=4)
    assert run["staleness_hist_per_step"] == [{"0": 16.0}, {"1": 16.0}, {"1": 8.0}]
    assert run["staleness_hist"] == {"0": 16.0, "1": 24.0}
    assert run["staleness_max"] == 1.0
    assert run["stale_dropped_share"] == pytest.approx(0.5 / 3)


def _records(async_seconds):
    """Two seeds: sync 2.0 and 2.5 completions/s, async_k1 3.0 and 4.0; sync 100 s to 0.5 both times."""
    out = []
    for seed, (sync_cps, async_cps, secs) in enumerate(zip((2.0, 2.5), (3.0, 4.0), async_seconds)):
        for side, cps, s in (("sync", sync_cps, 100.0), ("async_k1", async_cps, secs)):
            result = {"completions_per_s": cps, "seconds_to_0_5": s, "steps_to_0_5": 5, "staleness_hist": {"0": 1.0}}
            out.append({"round": seed, "side": side, "seed": seed, "warmup": False, "result": result})
            out[-1].update(load_before=0.5, load_after=0.5)
    return out


def test_the_result_names_its_fields_and_pairs_async_over_sync_by_seed(tmp_path):
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"faults_cases": 11, "faults_silent": 0, "cases": []}))
    equiv = {"max_abs_diff": 0.0}
    fields = bench.summary_fields(_records([50.0, None]), [1], equiv, bench.faults_fields(faults))
    for name in (
        "sync_equivalence_max_abs_diff",
        "speedup_completions_per_s",
        "speedup_ci_low",
        "time_to_reward_ratio_vs_sync",
        "time_to_reward_ratio_ci",
        "per_k",
        "staleness_histograms",
        "faults_cases",
        "faults_silent",
        "faults_source",
    ):
        assert name in fields, name
    assert fields["sync_equivalence_max_abs_diff"] == 0.0
    assert (fields["faults_cases"], fields["faults_silent"], fields["faults_source"]) == (11, 0, str(faults))
    # per-seed ratios 3.0 / 2.0 = 1.5 and 4.0 / 2.5 = 1.6: median 1.55
    assert fields["speedup_completions_per_s"] == pytest.approx(1.55)
    assert fields["speedup_ci_low"] == pytest.approx(1.5)
    # async / sync seconds: seed 0 50 / 100; seed 1's async never reached 0.5, its pair is dropped
    assert fields["time_to_reward_ratio_vs_sync"] == pytest.approx(0.5)
    assert fields["per_k"]["1"]["time_to_reward_ratio_vs_sync"]["dropped_rounds"] == 1
    assert fields["staleness_histograms"]["async_k1"] == [{"0": 1.0}, {"0": 1.0}]


def test_time_to_reward_is_null_with_the_reason_when_no_seed_reached_it():
    fields = bench.summary_fields(_records([None, None]), [1], {"max_abs_diff": 0.0}, {})
    assert fields["time_to_reward_ratio_vs_sync"] is None
    assert "seconds_to_0_5" in fields["time_to_reward_ratio_reason"]
    assert fields["speedup_completions_per_s"] == pytest.approx(1.55)  # throughput is still paired


def test_the_harness_writes_host_rounds_and_the_ratio_beside_the_bench_fields():
    records = _records([50.0, 60.0])
    host = {"threads": 2, "cpu_model": "test"}
    extra = bench.summary_fields(records, [1], {"max_abs_diff": 0.0}, {})
    out = bench.write_result(
        None,
        benchmark="async_rl",
        host=host,
        rounds=records,
        candidate="async_k1",
        baseline="sync",
        metric="completions_per_s",
        extra=extra,
    )
    assert out["ratio_median"] == pytest.approx(out["speedup_completions_per_s"])
    assert out["host"] == host and len(out["rounds"]) == 4 and len(out["ratio_ci"]) == 2
    assert out["headline"] is False  # 2 seeds a side < 5
