"""The README's generated figures: each block between `<!-- NAME -->` and `<!-- /NAME -->` is
rendered from a results file, so a quoted figure is the measured one.

    python tools/readme_figures.py            # rewrite the blocks in README.md
    python tools/readme_figures.py --check    # exit 1 naming a block that is stale

Blocks: `demo-precision` (bench/results/demo_precision.json: `make demo` per host kind) and
`headline-figures` (the Headline figures table: one row per file of `HEADLINE_ROWS`, written by
bench/_shared/harness.py; a file not yet re-measured with the harness keeps its single-run
figures from `SINGLE_RUN`, marked so, until it is).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Callable

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


@dataclass(frozen=True)
class HeadlineRow:
    """One row of the README's Headline figures: a harness result file and how to name its sides."""

    what: str
    file: str
    peer: str  # the baseline side, as the table names it
    unit: str  # of the result's `metric`


HEADLINE_ROWS = (
    HeadlineRow(
        "SFT, default model, batch 8 × 512", "sft.json", "TRL `SFTTrainer` at its fastest setting", "real tokens/s"
    ),
    HeadlineRow("GRPO, 8 × 8 samples, LoRA", "grpo.json", "TRL `GRPOTrainer`", "completions/s"),
    HeadlineRow(
        "GRPO, wall-clock to held-out 0.5 from an SFT'd start (3 seeds a side)",
        "time_to_reward.json",
        "TRL `GRPOTrainer`",
        "s",
    ),
    HeadlineRow(
        "GRPO asynchronous, K = 1 (engine process + trainer, a thread each) vs synchronous (2 threads), same engine",
        "async_rl.json",
        "Tempering synchronous GRPO",
        "completions/s",
    ),
    HeadlineRow("DPO, LoRA r16", "dpo.json", "TRL `DPOTrainer` with precomputed reference", "pairs/s"),
    HeadlineRow("eval, 100 tasks × 4 samples", "eval.json", "HF `generate` batched", "samples/s"),
    HeadlineRow("generation, 32 requests in flight", "inference.json", "HF `generate` on batches of 32", "tokens/s"),
    HeadlineRow(
        "one stream alone (single-stream step), bf16 / int8", "single_stream.json", "llama.cpp Q8_0", "tokens/s"
    ),
    HeadlineRow("speculative decoding, batch 1", "speculative.json", "same target, no draft", "tokens/s"),
    HeadlineRow("sandbox", "sandbox.json", "bare subprocess", "runs/s"),
)
"""The files the README's headline table quotes, in its order; each must pass `headline_schema_missing`
once re-measured (tests/test_bench_results.py)."""

# (result, peer) cells of the files measured once, before the harness: quoted as they were.
SINGLE_RUN = {
    "sft.json": (
        "502.2 real tokens/s (3.67×), MFU 0.41 of the bf16 peak on executed FLOPs, alone, 2026-12-05 "
        "(history 289.8 / 2.01× on another host)",
        "TRL `SFTTrainer` at its fastest of default / `torch_compile` / packing: 137.0 (default)",
    ),
    "grpo.json": (
        "8.60 completions/s (4.54×; 5.21× per generated token), 5 timed steps a side, alone, 2026-12-05 "
        "(history: 9.17 / 5.88×, 6.07 / 3.89×)",
        "TRL `GRPOTrainer` 1.90",
    ),
    "time_to_reward.json": ("171 s (2.01×)", "TRL `GRPOTrainer` 343 s"),
    "eval.json": (
        "47.8 samples/s: **4.26×** batched HF `generate`, **4.89×** lm-evaluation-harness (HF backend), fastest "
        "batch size of each (21.2× per-sample `generate`; history 17.3×)",
        "HF `generate` batched 11.2; lm-eval 9.77",
    ),
    "inference.json": (
        "347.9 tokens/s: **1.03×** HF `generate` batched, **2.64×** llama.cpp Q8_0 with 32 sequences (7.9× HF "
        "`generate` one at a time; history 11.6×), alone, 2026-12-05",
        "HF `generate` on batches of 32: 336.6; llama.cpp 131.7",
    ),
    "single_stream.json": (
        "85.6 / 128.6 tokens/s: **0.57× / 0.85× llama.cpp Q8_0**, 2.03× / 1.71× HF `generate`, alone",
        "llama.cpp Q8_0 151.1 (1 thread, its faster here; node-llama-cpp's prebuilt binaries), HF `generate` "
        "42.2 / int8 75.0, same run",
    ),
    "speculative.json": (
        "1.69× (history; prompt lookup is 0.67× the single-stream step: it does not beat it)",
        "same target, no draft",
    ),
    "sandbox.json": ("+8.9 ms per run, 93.7 runs/s at 8-way", "bare subprocess"),
}


def headline_schema_missing(result: dict) -> list[str]:
    """The fields of a harness headline (bench/_shared/harness.py) that `result` lacks."""
    need = [("host", "cpu_model"), ("rounds",), ("ratio_median",), ("ratio_ci",)]
    missing = []
    for path in need:
        node = result
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            missing.append(".".join(path))
    return missing


def _median_of(result: dict, side: str) -> float:
    metric = result["metric"]
    values = [r["result"][metric] for r in result["rounds"] if r["side"] == side and not r["warmup"]]
    return median(v for v in values if v is not None)


def headline_row(row: HeadlineRow, result: dict) -> str:
    """A re-measured file's row: the candidate's median, the ratio with its interval (or parity), the host."""
    if not result["headline"]:
        raise SystemExit(f"bench/results/{row.file}: not a headline ({result['headline_refused']}); re-measure it")
    low, high = result["ratio_ci"]
    ratio = f"{result['ratio_median']:.2f}× [{low:.2f}, {high:.2f}]"
    verdict = f"parity ({ratio})" if result["parity"] else f"**{ratio}**"
    rounds = result["paired_rounds"]
    paired = "paired seeds" if any("seed" in r for r in result["rounds"]) else "interleaved rounds"
    host = result["host"]
    return (
        f"| {row.what} | {_median_of(result, result['candidate']):.1f} {row.unit}: {verdict}, median of {rounds} "
        f"{paired}, {result['date'][:10]} | {host['host_kind']} ({host['precision']}, {host['threads']} "
        f"threads) | {row.peer} {_median_of(result, result['baseline']):.1f} | [{row.file}](bench/results/{row.file}) |"
    )


def single_run_row(row: HeadlineRow, result: dict) -> str:
    """A file measured once before the harness: its figures as quoted then, marked single-run."""
    figures, peer = SINGLE_RUN[row.file]
    return (
        f"| {row.what} | {figures} (single run, no interval) | {_unrecorded_host(result)} | {peer} "
        f"| [{row.file}](bench/results/{row.file}) |"
    )


def _unrecorded_host(result: dict) -> str:
    """A file written before results recorded their host's flags: its precision where it kept one."""
    return f"not recorded ({result['precision']})" if result.get("precision") else "not recorded"


def loop_row(result: dict) -> str:
    """The capability row: held-out final-answer accuracy before and after the loop, over seeds."""
    acc = result["metrics"]["final_answer_accuracy"]
    return (
        f"| the loop, held-out 2-digit addition | {acc['before']['mean']:.2f} → {acc['after']['mean']:.2f} "
        f"({len(result['seeds'])} seeds) | {_unrecorded_host(result)} | the base model "
        "| [loop.json](bench/results/loop.json) |"
    )


def headline_figures(results: dict[str, dict]) -> str:
    """The README's Headline figures table from `results` (file name -> its JSON)."""
    rows = ["| what | result | host kind | peer | file |", "|---|---|---|---|---|"]
    for row in HEADLINE_ROWS:
        result = results[row.file]
        rows.append(single_run_row(row, result) if headline_schema_missing(result) else headline_row(row, result))
    rows.append(loop_row(results["loop.json"]))
    return "\n".join(rows)


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


BLOCKS: dict[str, Callable[[], str]] = {
    "demo-precision": lambda: demo_precision(_load("demo_precision.json")),
    "headline-figures": lambda: headline_figures(
        {f: _load(f) for f in [r.file for r in HEADLINE_ROWS] + ["loop.json"]}
    ),
}
"""Each block's renderer: reads its results files and returns the block's body."""


def render(text: str) -> str:
    """`text` with every block it holds re-rendered from its results file."""
    for name, block in BLOCKS.items():
        body = block()
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
