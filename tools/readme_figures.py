"""The README's generated figures: each block between `<!-- NAME -->` and `<!-- /NAME -->` is
rendered from a results file, so a quoted figure is the measured one.

    python tools/readme_figures.py            # rewrite the blocks in README.md
    python tools/readme_figures.py --check    # exit 1 naming a block that is stale

Blocks: `demo-precision` (bench/results/demo_precision.json: `make demo` per host kind).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results"

HOST_KINDS = {"bf16": "AMX / AVX512-BF16", "fp32": "AVX2 (no native bf16)"}


def demo_precision(result: dict) -> str:
    """`make demo`'s held-out addition after the loop and its wall time, per host kind."""
    rows = [
        "| host kind | `precision: auto` | strict after (95% CI) | final-answer after (95% CI) | reworded strict | wall time |",
        "|---|---|---|---|---|---|",
    ]
    for precision, kind in HOST_KINDS.items():
        side = result[precision]
        walls = side["wall_s"]
        rows.append(
            f"| {kind} | {precision} | {_ci(side['strict'])} (from {side['strict_before_mean']:.2f}) "
            f"| {_ci(side['final'])} (from {side['final_before_mean']:.2f}) | {side['reworded_strict']['mean']:.2f} "
            f"| {side['wall_s_mean'] / 60:.1f} min ({min(walls) / 60:.1f}–{max(walls) / 60:.1f}) |"
        )
    seeds = len(result["bf16"]["seeds"])
    host = result["host"]["cpu"]
    return "\n".join(
        [
            *rows,
            "",
            f"{seeds} seeds a side on one {host} (2 cores), interleaved; the AVX2 row ran on the same host as an "
            "AVX2-only one (`TEMPERING_CPU_FEATURES=avx2`: fp32, AVX2 ATen / oneDNN / inductor code, but MKL's GEMMs "
            "still AVX-512, so a real AVX2 host is likely slower). Intervals resample the 50 held-out "
            "items (`bench/results/demo_precision.json`, docs/hosts.md).",
        ]
    )


def _ci(stat: dict) -> str:
    return f"{stat['mean']:.2f} [{stat['low']:.2f}, {stat['high']:.2f}]"


BLOCKS = {"demo-precision": (RESULTS / "demo_precision.json", demo_precision)}


def render(text: str) -> str:
    """`text` with every block it holds re-rendered from its results file."""
    for name, (path, fn) in BLOCKS.items():
        body = fn(json.loads(path.read_text()))
        pattern = re.compile(rf"(<!-- {name} -->\n)(?:.*?\n)?(<!-- /{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{README}: no <!-- {name} --> ... <!-- /{name} --> block")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a block differs from its results")
    args = p.parse_args()
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            sys.exit(f"{README}: generated figures are stale; run python tools/readme_figures.py")
        return
    README.write_text(new)


if __name__ == "__main__":
    main()
