"""Does GRPO teach the default model 2-digit addition? Three seeds, before/after, mean +- std.

Runs `temper grpo examples/grpo_arith.yaml` for each seed (in parallel, one torch thread
each, so three seeds fit the machine's 2 cores side by side; each run stops after
`train.max_minutes`), then reads every run's summary: held-out greedy accuracy on 100
disjoint problems, before and after, as

  final-answer accuracy  the last integer in the reply is right   (reward part `correct`)
  strict accuracy        the reply is just the right number       (reward part `strict`)

Each run dir holds curves.png (training reward and both held-out curves).

    python bench/experiments/grpo_learning.py [--seeds 0 1 2] [--minutes 30] [--sequential]

Writes bench/results/grpo_learning.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402


def launch(seed: int, minutes: float, threads: int, out: str, extra: list[str]) -> subprocess.Popen:
    cmd = [
        str(Path(sys.executable).parent / "temper"),
        "grpo",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        "--name",
        f"grpo-arith-seed{seed}",
        "--out",
        out,
        "--set",
        f"train.seed={seed}",
        "--set",
        f"train.max_minutes={minutes}",
        "--set",
        f"train.threads={threads}",
        *extra,
    ]
    log = open(Path(out) / f"grpo-arith-seed{seed}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def mean_std(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "values": xs}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--out", default=str(ROOT / "runs"))
    p.add_argument("--sequential", action="store_true", help="one run at a time, 2 threads each")
    p.add_argument("--set", dest="extra", action="append", default=[], help="extra --set overrides")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    extra = [x for kv in args.extra for x in ("--set", kv)]
    t0 = time.time()
    if args.sequential:
        codes = [launch(s, args.minutes, 2, args.out, extra).wait() for s in args.seeds]
    else:
        procs = [launch(s, args.minutes, 1, args.out, extra) for s in args.seeds]
        codes = [pr.wait() for pr in procs]
    if any(codes):
        raise SystemExit(f"runs failed with exit codes {codes}; see {args.out}/grpo-arith-seed*.log")
    runs = {}
    for s in args.seeds:
        summary = json.loads((Path(args.out) / f"grpo-arith-seed{s}" / "summary.json").read_text())
        runs[s] = {
            k: summary[k]
            for k in (
                "steps",
                "seconds",
                "heldout_before",
                "heldout_after",
                "heldout_history",
                "alarms",
                "reward_first",
                "reward_last",
                "curves",
            )
        }
    table = {}
    for metric in ("correct", "strict"):
        for when in ("before", "after"):
            table[f"{metric}_{when}"] = mean_std([runs[s][f"heldout_{when}"][metric] for s in args.seeds])
    result = {
        "benchmark": "grpo_learning",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "config": "examples/grpo_arith.yaml",
        "seeds": args.seeds,
        "minutes_cap": args.minutes,
        "parallel": not args.sequential,
        "wall_s": time.time() - t0,
        "metrics": {
            "final_answer_accuracy": {"before": table["correct_before"], "after": table["correct_after"]},
            "strict_accuracy": {"before": table["strict_before"], "after": table["strict_after"]},
        },
        "targets": {"final_answer_accuracy": 0.60, "strict_accuracy": 0.50},
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "grpo_learning.json").write_text(json.dumps(result, indent=1))
    for name, m in result["metrics"].items():
        b, a = m["before"], m["after"]
        print(f"{name:24} before {b['mean']:.3f} +- {b['std']:.3f}   after {a['mean']:.3f} +- {a['std']:.3f}")


if __name__ == "__main__":
    main()
