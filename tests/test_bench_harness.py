"""The benchmark harness (bench/_shared/harness.py): interleaved rounds, the ratio's bootstrap
interval pinned by hand, the load bound that refuses a headline, the host read from /proc/cpuinfo,
and a side run in a fresh process."""

import json
import sys
from itertools import count
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _shared import harness  # noqa: E402


def rounds_of(candidate, baseline, *, metric="tokens_per_s", load=0.5):
    """Records as `interleave` writes them: one candidate and one baseline run per round."""
    return [
        {"round": i, "side": side, "warmup": False, "load_before": load, "load_after": load, "result": {metric: v}}
        for i, (c, b) in enumerate(zip(candidate, baseline))
        for side, v in (("ours", c), ("peer", b))
    ]


def test_the_interval_is_the_exact_bootstrap_interval_of_the_median_ratio():
    # Per-round ratios 3, 1, 7, 5, 2, 6, 4 (the values 1..7, shuffled; each pair its own scale).
    # The median of a resample of 7 is <= k when at least 4 of the 7 draws are <= k:
    # P(Bin(7, k/7) >= 4) = 0.0102 at k = 1 and 0.1083 at k = 2, so the 2.5% quantile is 2;
    # by symmetry the 97.5% quantile is 6. The point is the median of the data, 4.
    ours = [30, 10, 70, 50, 20, 60, 40]
    peer = [10, 10, 10, 10, 10, 10, 10]
    scaled = [o * s for o, s in zip(ours, range(1, 8))], [p * s for p, s in zip(peer, range(1, 8))]
    r = harness.ratio(rounds_of(*scaled), "ours", "peer", "tokens_per_s")
    assert r["ratio_median"] == 4.0
    assert r["ratio_ci"] == [2.0, 6.0]
    assert r["ratio_per_round"] == [3, 1, 7, 5, 2, 6, 4]
    assert r["parity"] is False and r["paired_rounds"] == 7


def test_seconds_invert_the_ratio_so_above_one_means_the_candidate_is_faster():
    # time to a threshold: ours 100 s against the peer's 200 s in every seed: 2x, no spread
    r = harness.ratio(
        rounds_of([100, 100, 100], [200, 200, 200], metric="s"), "ours", "peer", "s", higher_is_better=False
    )
    assert (r["ratio_median"], r["ratio_ci"], r["parity"]) == (2.0, [2.0, 2.0], False)


def test_parity_when_the_interval_holds_one_and_a_missing_value_drops_its_round():
    r = harness.ratio(rounds_of([9, 10, 11, 12, None], [10, 10, 10, 10, 10]), "ours", "peer", "tokens_per_s")
    assert r["ratio_per_round"] == [0.9, 1.0, 1.1, 1.2] and r["dropped_rounds"] == 1
    assert r["ratio_ci"][0] <= 1.0 <= r["ratio_ci"][1] and r["parity"] is True
    with pytest.raises(ValueError, match="no round has"):
        harness.ratio(rounds_of([None], [1]), "ours", "peer", "tokens_per_s")


def test_interleave_runs_abab_after_the_warmup_rounds_and_reads_the_load_around_each_run():
    calls, loads = [], count()
    sides = {"a": lambda: calls.append("a") or {"v": 1}, "b": lambda: calls.append("b") or {"v": 2}}
    records = harness.interleave(sides, rounds=2, warmup=1, load=lambda: float(next(loads)))
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert [(r["round"], r["side"], r["warmup"]) for r in records] == [
        (-1, "a", True), (-1, "b", True), (0, "a", False), (0, "b", False), (1, "a", False), (1, "b", False),
    ]  # fmt: skip
    assert [(r["load_before"], r["load_after"]) for r in records[:2]] == [(0.0, 1.0), (2.0, 3.0)]
    assert harness.side_values(records, "b", "v") == {0: 2, 1: 2}  # warm-up rounds not counted


def test_abba_reverses_every_other_round():
    calls = []
    sides = {s: (lambda s=s: calls.append(s) or {}) for s in "ab"}
    harness.interleave(sides, rounds=3, warmup=0, order="ABBA", load=lambda: 0.0)
    assert "".join(calls) == "abbaab"


def test_paired_seeds_pass_each_seed_to_both_sides_the_first_side_alternating():
    calls = []
    records = harness.paired_seeds(
        lambda side, seed: calls.append((side, seed)) or {"s": seed}, ["ours", "peer"], [7, 8, 9], load=lambda: 0.0
    )
    assert calls == [("ours", 7), ("peer", 7), ("peer", 8), ("ours", 8), ("ours", 9), ("peer", 9)]
    assert [(r["round"], r["seed"]) for r in records if r["side"] == "peer"] == [(0, 7), (1, 8), (2, 9)]


def test_a_load_above_the_bound_or_too_few_rounds_refuses_the_headline(tmp_path):
    fake_host = {"threads": 2}
    quiet = rounds_of([2] * 5, [1] * 5, load=2.9)
    ok = harness.write_result(
        tmp_path / "r.json",
        benchmark="x",
        host=fake_host,
        rounds=quiet,
        candidate="ours",
        baseline="peer",
        metric="tokens_per_s",
    )
    assert ok["headline"] is True and ok["headline_refused"] is None and ok["max_load"] == 3.0  # threads + 1
    assert json.loads((tmp_path / "r.json").read_text())["ratio_median"] == 2.0
    loaded = rounds_of([2] * 5, [1] * 5, load=2.9)
    loaded[3]["load_after"] = 3.5
    busy = harness.write_result(
        None, benchmark="x", host=fake_host, rounds=loaded, candidate="ours", baseline="peer", metric="tokens_per_s"
    )
    assert busy["headline"] is False and busy["headline_refused"] == "load average reached 3.50 > max_load 3.00"
    assert busy["ratio_median"] == 2.0  # the figures are kept
    bound = harness.write_result(
        None,
        benchmark="x",
        host=fake_host,
        rounds=loaded,
        max_load=4.0,
        candidate="ours",
        baseline="peer",
        metric="tokens_per_s",
    )
    assert bound["headline"] is True
    short = harness.headline_refusal(rounds_of([2] * 4, [1] * 4), max_load=9.0)
    assert short == "4 timed rounds a side < 5"
    both = harness.headline_refusal(rounds_of([2] * 4, [1] * 4, load=9.5), max_load=9.0)
    assert both == "load average reached 9.50 > max_load 9.00; 4 timed rounds a side < 5"


FAKE_CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni avx_vnni
processor\t: 1
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni avx_vnni
"""


def test_host_reads_the_model_and_the_flags_that_decide_precision(monkeypatch):
    monkeypatch.delenv("TEMPERING_CPU_FEATURES", raising=False)
    h = harness.host("bf16", 2, cpuinfo=FAKE_CPUINFO)
    assert h["cpu_model"] == "AMD EPYC 9R14 96-Core Processor"
    assert h["cpu_flags"] == ["avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx_vnni"]
    assert (h["host_kind"], h["precision"], h["threads"], h["cpu_features_mask"]) == ("AVX512-BF16", "bf16", 2, None)
    assert h["cores"] >= 1 and h["torch"] and h["transformers"]
    # the same host run as an AVX2 one is recorded as what it ran as
    monkeypatch.setenv("TEMPERING_CPU_FEATURES", "avx2")
    masked = harness.host("fp32", 2, cpuinfo=FAKE_CPUINFO)
    assert (masked["host_kind"], masked["cpu_flags"], masked["cpu_features_mask"]) == ("AVX2", ["avx2"], "avx2")
    assert harness.host_kind(["avx2", "avx512f", "avx512_bf16", "amx_bf16"]) == "AMX"


def test_a_side_runs_in_a_fresh_process_and_its_failure_is_raised(tmp_path):
    script = tmp_path / "side.py"
    script.write_text(
        "import os\ndef run(n):\n    return {'n': n * 2, 'pid': os.getpid()}\ndef bad():\n    raise SystemExit(3)\n"
    )
    got = harness.call_in_subprocess(script, "run", {"n": 21}, timeout_s=60)
    assert got["n"] == 42 and got["pid"] != __import__("os").getpid()
    with pytest.raises(RuntimeError, match="side.py:bad exited 3"):
        harness.call_in_subprocess(script, "bad", {}, timeout_s=60)


def test_a_side_figure_is_the_median_of_its_timed_rounds_and_a_failure_is_kept():
    records = [
        {"side": "trl", "warmup": w, "round": i, "result": {"tps": v, "peak_rss_mb": 1}}
        for i, (w, v) in enumerate([(True, 999.0), (False, 10.0), (False, 30.0), (False, 20.0)])
    ]
    summary = harness.side_summary(records, "trl", "tps")
    assert summary == {"tps": 20.0, "tps_rounds": [10.0, 30.0, 20.0], "peak_rss_mb": 1}
    failed = [{"side": "trl", "warmup": False, "round": 0, "result": {"failed": "exit 137"}}]
    assert harness.side_summary(failed, "trl", "tps") == {"failed": "exit 137"}


def test_seeds_run_side_by_side_make_the_same_records_and_a_seed_short_of_its_threshold_is_dropped():
    # Three seeds a side run in parallel elsewhere; seconds to a reward threshold, None: not reached.
    seconds = {"ours": {0: 100.0, 1: 150.0, 2: None}, "trl": {0: 300.0, 1: 300.0, 2: 400.0}}
    records = [
        harness.record(side, i, {"s_to_0_5": by_seed[seed]}, 1.0, 2.0, seed=seed)
        for side, by_seed in seconds.items()
        for i, seed in enumerate(by_seed)
    ]
    r = harness.write_result(
        None,
        benchmark="ttr",
        host={"threads": 3},
        rounds=records,
        candidate="ours",
        baseline="trl",
        metric="s_to_0_5",
        higher_is_better=False,
        min_rounds=3,
    )
    # per seed trl / ours: 3.0 and 2.0; the median of two values is their mean, 2.5
    assert r["ratio_per_round"] == [3.0, 2.0] and r["dropped_rounds"] == 1 and r["ratio_median"] == 2.5
    assert r["headline"] is True and r["min_rounds"] == 3
