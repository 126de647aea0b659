"""Paired before/after throughput of two source trees: did a change lose speed on the product paths?

    python bench/diagnostics/before_after.py [--before DIR --after DIR | --before-ref main --after-ref HEAD]
        [--workloads sft grpo eval] [--rounds 5] [--size small|smallest] [--out bench/results/before_after.json]

Each tree is a git worktree root (without `--before` / `--after`, detached worktrees of the two refs
are made under /tmp and removed afterwards). Every run is a fresh process of the project's Python
(`--python`, default this one) with `TREE/src:TREE` on PYTHONPATH, 2 torch threads, seed 0 and the
same data on both sides, running one workload of `before_after_workloads.py` (this checkout's copy
for both trees): SFT tokens/s and GRPO completions/s past the first step, eval samples/s.

Rounds interleave the sides, alternating which goes first (B A, then A B, ...), each workload's two
runs next to each other. The ratio after/before is the geometric mean of the per-round ratios with
a Student-t interval on their logs (`tempering.evals.stats.t_interval`): paired by round, so slow
drift of the machine's load cancels. "Within noise" is an interval holding 1.

Recorded beside the figures: that both sides did the same work (tokens, completions, samples; and,
from the same seed, whether the losses, rewards and eval scores are equal), the file each run
imported `tempering` from, the host (CPU, its bf16/AMX flags, cores), precision, threads, the load
average before and after each run and the busiest other processes at the start and the end.

Writes `--out` (bench/results/before_after.json) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402

CHILD = Path(__file__).resolve().parent / "before_after_workloads.py"
SIDES = ("before", "after")
WORKLOADS = ("sft", "grpo", "eval")
# Per workload and size: what one run does. "small" keeps a run near a minute on 2 busy cores.
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "small": {
        "sft": {"steps": 5, "batch": 4, "max_length": 512, "examples": 64},
        "grpo": {"steps": 3, "prompts": 4, "group": 4, "max_new_tokens": 16, "tasks": 200},
        "eval": {"suite": "arithmetic-add", "limit": 24},
    },
    "smallest": {
        "sft": {"steps": 2, "batch": 2, "max_length": 256, "examples": 16},
        "grpo": {"steps": 2, "prompts": 2, "group": 2, "max_new_tokens": 8, "tasks": 50},
        "eval": {"suite": "arithmetic-add", "limit": 4},
    },
}
HOST_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


# -- the pure parts: order of the runs, the ratio and its interval, the same-work check --------------
def schedule(workloads: list[str], rounds: int) -> list[tuple[int, str, str]]:
    """(round, workload, side) in run order: each workload's two runs back to back, the side that
    goes first alternating by round (before first in round 0)."""
    order = []
    for r in range(rounds):
        sides = SIDES if r % 2 == 0 else SIDES[::-1]
        order += [(r, w, side) for w in workloads for side in sides]
    return order


def paired_ratio(before: list[float], after: list[float], level: float = 0.95) -> dict[str, Any]:
    """after/before paired by round: the geometric mean of the per-round ratios with a t-interval
    on the log ratios (None with one round); `within_noise`: the interval holds 1."""
    from tempering.evals.stats import t_interval

    if len(before) != len(after) or not before:
        raise ValueError(f"paired rounds needed: {len(before)} before vs {len(after)} after")
    logs = [math.log(a / b) for b, a in zip(before, after)]
    out: dict[str, Any] = {
        "rounds": len(logs),
        "per_round": [a / b for b, a in zip(before, after)],
        "ratio": math.exp(sum(logs) / len(logs)),
        "low": None,
        "high": None,
        "within_noise": None,
        "level": level,
        "method": "exp of a Student-t interval on the per-round log(after/before) (tempering.evals.stats.t_interval)",
    }
    if len(logs) >= 2:
        est = t_interval(logs, level=level)
        out.update(low=math.exp(est.low), high=math.exp(est.high))
        out["within_noise"] = bool(out["low"] <= 1.0 <= out["high"])
    return out


def same_work(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether every run did the same work, and whether the same-seed figures agree across sides."""
    works = {json.dumps(r["work"], sort_keys=True) for r in runs}
    out: dict[str, Any] = {"same_work": len(works) == 1, "work": [json.loads(w) for w in sorted(works)]}
    for key in sorted({k for r in runs for k in r["reproduced"]}):
        by_side = {s: [r["reproduced"].get(key) for r in runs if r["side"] == s] for s in SIDES}
        values = {json.dumps(v, sort_keys=True) for vs in by_side.values() for v in vs}
        out[key] = {"equal": len(values) == 1, **{s: by_side[s][0] for s in SIDES if by_side[s]}}
        if len(values) > 1 and all(isinstance(v, (int, float)) for vs in by_side.values() for v in vs):
            flat = [v for vs in by_side.values() for v in vs]
            out[key]["max_abs_diff"] = max(flat) - min(flat)
    return out


# -- the host and the load ---------------------------------------------------------------------------
def host() -> dict[str, Any]:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return {
        "cpu": cpu_name(),
        "cpu_model": next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in ln
            ),
            None,
        ),
        "flags": {f: f in flags for f in HOST_FLAGS},
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def busiest(n: int = 8) -> list[str]:
    """The `n` processes using the most CPU now (pid, %cpu, command cut to 100 characters)."""
    out = subprocess.run(
        ["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True, check=False
    ).stdout
    return [line.strip()[:100] for line in out.splitlines()[:n]]


# -- the trees and the runs --------------------------------------------------------------------------
def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def make_worktree(ref: str, made: list[Path]) -> Path:
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    path = Path(tempfile.gettempdir()) / f"before_after-{sha[:10]}"
    if not path.exists():
        git("worktree", "add", "--detach", str(path), sha)
        made.append(path)
    return path


def tree_info(tree: Path) -> dict[str, Any]:
    return {
        "path": str(tree),
        "commit": git("rev-parse", "HEAD", cwd=tree),
        "subject": git("log", "-1", "--format=%s", cwd=tree),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no", cwd=tree)),
    }


def write_data(work: Path, examples: int) -> tuple[str, str]:
    """The SFT conversations, written once and read by both sides; (path, sha256)."""
    import hashlib

    from _shared.sft_data import make_bench_conversations

    path = work / "sft_data.jsonl"
    text = "".join(json.dumps(c) + "\n" for c in make_bench_conversations(examples, seed=0))
    path.write_text(text)
    return str(path), hashlib.sha256(text.encode()).hexdigest()


def run_one(python: str, tree: Path, workload: str, spec: dict[str, Any], work: Path, timeout: float) -> dict[str, Any]:
    """One workload in a fresh process on `tree`; its result with the load average around it."""
    work.mkdir(parents=True)
    spec_path, out_path = work / "spec.json", work / "result.json"
    spec_path.write_text(json.dumps({**spec, "work": str(work / "w")}))
    env = {
        **os.environ,
        "PYTHONPATH": f"{tree / 'src'}:{tree}",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    load_before, t0 = os.getloadavg(), time.perf_counter()
    proc = subprocess.run(
        [python, str(CHILD), workload, str(spec_path), str(out_path)],
        cwd=work,  # a project registry is looked up from here: none under /tmp
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{workload} on {tree} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(out_path.read_text())
    expected = str(tree / "src" / "tempering")
    if not result["tempering_file"].startswith(expected):
        raise RuntimeError(f"{workload} on {tree} imported tempering from {result['tempering_file']}")
    return {**result, "load_before": list(load_before), "load_after": list(os.getloadavg()), "run_wall_s": wall}


def summarise(runs: list[dict[str, Any]], workloads: list[str]) -> dict[str, Any]:
    out = {}
    for w in workloads:
        mine = sorted((r for r in runs if r["workload"] == w), key=lambda r: r["round"])
        before = [r["figure"] for r in mine if r["side"] == "before"]
        after = [r["figure"] for r in mine if r["side"] == "after"]
        out[w] = {
            "unit": mine[0]["unit"],
            "before": before,
            "after": after,
            "ratio_after_over_before": paired_ratio(before, after),
            "check": same_work(mine),
        }
    return out


def print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="after / before, paired by round")
    columns = ("workload", "unit", "before (mean)", "after (mean)", "ratio", "95% interval", "same work")
    for col in (*columns, "same-seed figures equal"):
        table.add_column(col)
    for w, s in summary.items():
        r = s["ratio_after_over_before"]
        interval = f"[{r['low']:.3f}, {r['high']:.3f}]" if r["low"] is not None else "n/a (1 round)"
        equal = ", ".join(f"{k} {'yes' if v['equal'] else 'NO'}" for k, v in s["check"].items() if isinstance(v, dict))
        table.add_row(
            w,
            s["unit"],
            f"{sum(s['before']) / len(s['before']):.4g}",
            f"{sum(s['after']) / len(s['after']):.4g}",
            f"{r['ratio']:.3f}",
            interval,
            "yes" if s["check"]["same_work"] else "NO",
            equal,
        )
    Console(width=160).print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--before", type=Path, help="worktree root of the code before (default: a worktree of --before-ref)")
    p.add_argument("--after", type=Path, help="worktree root of the code after (default: a worktree of --after-ref)")
    p.add_argument("--before-ref", default="main")
    p.add_argument("--after-ref", default="HEAD")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--python", default=sys.executable, help="the project's Python (default: this one)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--ran-beside", default="", help="what else ran on the machine, in words (recorded)")
    p.add_argument("--out", type=Path, default=RESULTS / "before_after.json")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")

    made: list[Path] = []
    try:
        trees = {
            "before": args.before.resolve() if args.before else make_worktree(args.before_ref, made),
            "after": args.after.resolve() if args.after else make_worktree(args.after_ref, made),
        }
        with tempfile.TemporaryDirectory(prefix="before_after-") as tmp:
            work = Path(tmp)
            sizes = SIZES[args.size]
            data, data_sha = write_data(work, sizes["sft"]["examples"])
            specs = {w: {**sizes[w], "precision": args.precision} for w in args.workloads}
            if "sft" in specs:
                specs["sft"]["data"] = data
            started, busy_start, runs = time.strftime("%Y-%m-%dT%H:%M:%S%z"), busiest(), []
            for i, (r, w, side) in enumerate(schedule(args.workloads, args.rounds)):
                res = run_one(args.python, trees[side], w, specs[w], work / f"{i:03d}-{w}-{side}", args.timeout)
                runs.append({"round": r, "workload": w, "side": side, **res})
                print(f"round {r} {w:4s} {side:6s} {res['figure']:9.2f} {res['unit']}", flush=True)
            summary = summarise(runs, args.workloads)
            record = {
                "what": "paired before/after throughput of the product paths (sft, grpo, eval) on two source trees",
                "started": started,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "trees": {s: tree_info(t) for s, t in trees.items()},
                "host": host(),
                "settings": {
                    "rounds": args.rounds,
                    "size": args.size,
                    "sizes": specs,
                    "precision_requested": args.precision,
                    "precision": sorted({r["precision"] for r in runs}),
                    "torch_threads": sorted({r["torch_threads"] for r in runs}),
                    "torch": sorted({r["torch_version"] for r in runs}),
                    "sft_data_sha256": data_sha if "sft" in specs else None,
                    "python": args.python,
                },
                "order": "each round: every workload's before and after back to back; before first in even rounds",
                "ran_beside": args.ran_beside,
                "busiest_processes": {"start": busy_start, "end": busiest()},
                "results": summary,
                "runs": runs,
            }
    finally:
        for path in made:
            git("worktree", "remove", "--force", str(path))
    from tempering.atomic import write_text_atomic

    write_text_atomic(args.out, json.dumps(record, indent=1))
    print_table(summary)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
