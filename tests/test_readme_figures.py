"""The README's generated figures are the measured ones: each block equals what
tools/readme_figures.py renders from its results files, and a headline row re-measured by the
bench harness shows its median, interval, parity and host kind."""

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_blocks_are_rendered_from_their_results():
    tool = load_script("tools/readme_figures.py")
    text = (ROOT / "README.md").read_text()
    assert tool.render(text) == text, "stale: run python tools/readme_figures.py"


def test_a_changed_result_makes_the_block_stale(tmp_path, monkeypatch):
    tool = load_script("tools/readme_figures.py")
    result = json.loads((ROOT / "bench" / "results" / "demo_precision.json").read_text())
    result["fp32"]["strict"]["mean"] += 0.5
    changed = tmp_path / "demo_precision.json"
    changed.write_text(json.dumps(result))
    monkeypatch.setitem(tool.BLOCKS, "demo-precision", lambda: tool.demo_precision(json.loads(changed.read_text())))
    text = (ROOT / "README.md").read_text()
    assert tool.render(text) != text
    with pytest.raises(SystemExit, match="no <!-- demo-precision -->"):
        tool.render("a README without the block")


def harness_result(candidate, baseline, *, headline=True):
    """A result as bench/_shared/harness.py writes it, over the given per-round values."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _shared import harness

    rounds = [
        {"round": i, "side": side, "warmup": False, "load_before": 0.1, "load_after": 2.1, "result": {"tps": v}}
        for i, pair in enumerate(zip(candidate, baseline))
        for side, v in zip(("ours", "trl"), pair)
    ]
    host = {"cpu_model": "X", "host_kind": "AVX2", "precision": "fp32", "threads": 2}
    result = harness.write_result(
        None, benchmark="sft", host=host, rounds=rounds, candidate="ours", baseline="trl", metric="tps"
    )
    return {
        **result,
        "date": "2026-12-08 10:00:00",
        "headline": headline,
        "headline_refused": None if headline else "busy",
    }


def test_a_remeasured_row_gives_the_median_its_interval_and_the_host_kind():
    tool = load_script("tools/readme_figures.py")
    row = tool.HEADLINE_ROWS[0]
    # per-round ratios 2, 2, 2, 2, 2: median 2 with the interval [2, 2]; candidate median 200
    fast = tool.headline_row(row, harness_result([200, 210, 190, 220, 180], [100, 105, 95, 110, 90]))
    assert "| 200.0 real tokens/s: **2.00× [2.00, 2.00]**, median of 5 interleaved rounds, 2026-12-08 |" in fast
    assert "| AVX2 (fp32, 2 threads) |" in fast and f"| {row.peer} 100.0 |" in fast
    # ratios 0.9, 1.0, 1.1, 1.2, 1.0: the interval holds 1
    even = tool.headline_row(row, harness_result([90, 100, 110, 120, 100], [100] * 5))
    assert ": parity (1.00× [" in even and "**" not in even
    with pytest.raises(SystemExit, match="sft.json: not a headline \\(busy\\)"):
        tool.headline_row(row, harness_result([2] * 5, [1] * 5, headline=False))


def test_a_file_not_yet_remeasured_keeps_its_figures_marked_single_run():
    tool = load_script("tools/readme_figures.py")
    row = tool.HEADLINE_ROWS[0]
    legacy = {"precision": "bf16", "ratio_real_tokens_per_s": 3.67}
    assert tool.headline_schema_missing(legacy) == ["host.cpu_model", "rounds", "ratio_median", "ratio_ci"]
    line = tool.single_run_row(row, legacy)
    assert tool.SINGLE_RUN[row.file][0] + " (single run, no interval) | not recorded (bf16) |" in line
