"""Wall-clock to a held-out accuracy: Tempering GRPO against TRL's `GRPOTrainer`, seeds a side.

Users of RL care about the time to a reward level, not completions per second. Both sides are
set up alike by bench/_shared/grpo_sides.py (the default model + LoRA r16, built-in 2-digit
addition, the composite reward of examples/grpo_arith.yaml, 8 prompts x 8 samples, <= 32 new
tokens, lr 2e-4, token-mean clip 0.2, TRL at its fastest settings here) and start from the same
weights (`--start`: the default model, or a model directory such as an exported SFT).

Each run trains for `--minutes` of wall clock and saves its LoRA adapter every `--mark-s` seconds
of training time (the save is not counted: `grpo_sides` takes it off the clock). Afterwards each
saved adapter is scored by Tempering's evaluator (`temper eval run`, greedy) on the same 100
held-out additions (examples/grpo_arith.yaml's held-out split), in time order, until one reaches
the highest target. The start model is scored once. Time to accuracy `a` = the training seconds of
a run's first mark at or above `a`.

    python bench/experiments/time_to_reward.py [--seeds 0 1 2] [--minutes 60] [--mark-s 120]
        [--sides tempering trl] [--sequential] [--work /tmp/ttr] [--results DIR]

A dry run on a tiny random model (no learning; checks the plumbing in a few minutes):
`python bench/_shared/model_shapes.py /tmp/shapes tiny`, then
`... time_to_reward.py --start /tmp/shapes/tiny --minutes 0.4 --mark-s 8 --seeds 0 1 --results /tmp/ttr-dry`.

Seeds of one side run in parallel with one torch thread each (the machine's 2 cores; `--sequential`
runs them one after another with `--threads`); the sides run one after the other, alone. Training
and scoring are resumable: a finished run (its `marks.json`) or score (its `results.json`) is kept.

Writes bench/results/time_to_reward.json and `ratio_time_to_reward_0_5` / `_0_7` into
bench/results/grpo.json: TRL's mean seconds over Tempering's when every run reached the accuracy;
when some TRL run did not, the ratio is a lower bound (its seconds counted as the budget) and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.grpo_sides import Shape, run_tempering, run_trl  # noqa: E402
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402

TARGETS = (0.5, 0.7)
SIDES = ("tempering", "trl")
HELDOUT = {"source": "builtin:arithmetic", "ops": "+", "split": "heldout", "n": 100, "seed": 0}


def child(side: str, shape: Shape, minutes: float, mark_s: float, out: Path) -> None:
    """Train one run, saving the adapter at each mark of training time; writes out/marks.json."""
    from tempering.models.lora import loadable_base

    marks: list[dict] = []
    budget, base = minutes * 60, loadable_base(shape.model)

    def on_step(model, seconds: float) -> bool:
        if seconds >= mark_s * (len(marks) + 1) or seconds >= budget:
            path = out / f"mark-{len(marks) + 1:03d}"
            model.save_pretrained(str(path))
            config = path / "adapter_config.json"  # the same base on both sides, by the spec eval loads
            config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}))
            marks.append({"mark": len(marks) + 1, "seconds": seconds, "adapter": str(path)})
        return seconds >= budget

    steps = 100_000  # the budget stops the run
    run = run_tempering if side == "tempering" else run_trl
    result = run(shape, steps, 0, on_step=on_step)
    (out / "marks.json").write_text(json.dumps({"marks": marks, "run": result}, default=str))


def launch(side: str, seed: int, args: argparse.Namespace, threads: int) -> subprocess.Popen | None:
    out = args.work / f"{side}-seed{seed}"
    if (out / "marks.json").is_file():
        return None
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--child", side, "--seed", str(seed), "--minutes", str(args.minutes)]
    cmd += ["--mark-s", str(args.mark_s), "--threads", str(threads), "--work", str(args.work), "--start", args.start]
    log = open(out / "train.log", "w")
    print(f"[{time.strftime('%H:%M:%S')}] train {side} seed {seed}", flush=True)
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def score(model: str, out: Path, suite: Path, threads: int) -> float:
    """Held-out accuracy of a model or adapter directory, by `temper eval run` (kept in `out`)."""
    if not (out / "results.json").is_file():
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "tempering.cli", "eval", "run", str(suite), "--model", model]
        cmd += ["--out", str(out), "--no-cache", "--threads", str(threads)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"temper eval run {model} failed:\n{proc.stderr[-2000:]}")
    results = json.loads((out / "results.json").read_text())
    return float(results["suites"][0]["metrics"]["accuracy"]["mean"])


def curve(run_dir: Path, suite: Path, threads: int, start_accuracy: float, up_to: float = max(TARGETS)) -> dict:
    """A run's held-out accuracy at each mark, in time order, up to the first at `up_to`."""
    marks = json.loads((run_dir / "marks.json").read_text())
    points = [{"seconds": 0.0, "accuracy": start_accuracy}]
    for m in marks["marks"]:
        acc = score(m["adapter"], run_dir / f"eval-{m['mark']:03d}", suite, threads)
        points.append({"seconds": m["seconds"], "accuracy": acc})
        print(f"  {run_dir.name} {m['seconds']:7.0f} s: {acc:.2f}", flush=True)
        if acc >= up_to:
            break
    targets = [a for a in TARGETS if a <= up_to]  # above `up_to` the marks were not all scored
    reached = {
        str(a): next((p["seconds"] for p in points if p["accuracy"] >= a), None) for a in targets
    }  # fmt: skip
    crossed = {str(a): crossing(points, a) for a in targets}
    steps = len(marks["run"]["rewards"])
    trained = sum(marks["run"]["step_seconds"])
    return {
        "points": points,
        "seconds_to": reached,
        "seconds_to_interpolated": crossed,
        "steps": steps,
        "train_seconds": trained,
    }


def crossing(points: list[dict], target: float) -> float | None:
    """Training seconds where the straight line between the last mark below `target` and the first
    at or above it crosses `target` (None: never reached). The first mark alone over-states the time
    by up to one mark interval; the line takes most of that quantisation out, on both sides alike."""
    for before, after in zip(points, points[1:]):
        if before["accuracy"] < target <= after["accuracy"]:
            rise = after["accuracy"] - before["accuracy"]
            return before["seconds"] + (after["seconds"] - before["seconds"]) * (target - before["accuracy"]) / rise
    return 0.0 if points and points[0]["accuracy"] >= target else None


def summarise(curves: dict, budget_s: float, key: str = "seconds_to") -> dict:
    """Per side and target: mean seconds over seeds (budget when not reached) and the ratio, from
    each run's first mark at the target (`seconds_to`) or the interpolated crossing."""
    out: dict = {}
    for a in map(str, TARGETS):
        if any(a not in r[key] for runs in curves.values() for r in runs.values()):
            out[a] = {"ratio": None, "ratio_kind": "not measured (marks scored only up to a lower target)"}
            continue
        side = {}
        for name, runs in curves.items():
            secs = [r[key][a] for r in runs.values()]
            side[name] = {
                "seconds": secs,
                "reached": sum(s is not None for s in secs),
                "mean_seconds": statistics.fmean(s if s is not None else budget_s for s in secs),
            }
        ours, peer = side.get("tempering"), side.get("trl")
        ratio, kind = None, "not measured"
        if ours and peer and ours["reached"] == len(ours["seconds"]):
            ratio = peer["mean_seconds"] / ours["mean_seconds"]
            kind = (
                "exact"
                if peer["reached"] == len(peer["seconds"])
                else "lower bound (TRL runs not reaching it count the budget)"
            )
        elif ours and peer:
            kind = "not reached by every Tempering run"
        out[a] = {"sides": side, "ratio": ratio, "ratio_kind": kind}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget per run")
    p.add_argument("--mark-s", type=float, default=120.0, help="training seconds between saved adapters")
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--start", default=Shape.model, help="the weights both sides start from")
    p.add_argument("--sequential", action="store_true", help="one run at a time with --threads")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/ttr"))
    p.add_argument("--note", default="", help="what else ran beside it")
    p.add_argument(
        "--up-to",
        type=float,
        default=max(TARGETS),
        help="score marks until this accuracy (a higher target: not measured)",
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the two result files (a dry run: /tmp)")
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        out = args.work / f"{args.child}-seed{args.seed}"
        child(args.child, Shape(model=args.start, seed=args.seed), args.minutes, args.mark_s, out)
        return
    if args.mark_s <= 0 or args.minutes <= 0:
        p.error("--minutes and --mark-s must be positive")
    args.work.mkdir(parents=True, exist_ok=True)
    threads = args.threads if args.sequential else 1
    t0 = time.time()
    load = {"before": os.getloadavg()}
    for side in args.sides:
        procs = []
        for seed in args.seeds:
            proc = launch(side, seed, args, threads)
            if proc is not None and args.sequential:
                proc.wait()
            elif proc is not None:
                procs.append(proc)
        for proc in procs:
            proc.wait()
        load[f"after_{side}"] = os.getloadavg()
        failed = [s for s in args.seeds if not (args.work / f"{side}-seed{s}" / "marks.json").is_file()]
        if failed:
            raise SystemExit(f"{side}: seeds {failed} did not finish (see {args.work}/{side}-seed*/train.log)")
    suite = args.work / "suite-heldout-add.yaml"
    suite.write_text(
        json.dumps(
            {
                "name": "heldout-add",
                "track": "reasoning",
                "description": "the 100 held-out 2-digit additions of examples/grpo_arith.yaml, final answer",
                "tasks": HELDOUT,
                "templates": ["{prompt}"],
                "sampling": {"temperature": 0.0, "n": 1, "max_new_tokens": 32},
                "metrics": ["accuracy"],
                "seeds": 1,
            }
        )
    )
    start = score(args.start, args.work / "eval-start", suite, args.threads)
    print(f"start: held-out accuracy {start:.2f}", flush=True)
    curves = {
        side: {str(s): curve(args.work / f"{side}-seed{s}", suite, args.threads, start, args.up_to) for s in args.seeds}
        for side in args.sides
    }
    summary = summarise(curves, args.minutes * 60)
    interpolated = summarise(curves, args.minutes * 60, "seconds_to_interpolated")
    record = {
        "benchmark": "time_to_reward",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "python bench/experiments/time_to_reward.py " + " ".join(sys.argv[1:]),
        "start": args.start,
        "start_accuracy": start,
        "shape": vars(Shape(model=args.start)),
        "held_out": HELDOUT,
        "budget_minutes": args.minutes,
        "mark_seconds": args.mark_s,
        "parallel_seeds": not args.sequential,
        "threads_per_run": threads,
        "cpu": cpu_name(),
        "load_average": load,
        "wall_s": time.time() - t0,
        "note": args.note,
        "targets": summary,
        "targets_interpolated": interpolated,
        "curves": curves,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "time_to_reward.json").write_text(json.dumps(record, indent=1))
    grpo_path = args.results / "grpo.json"
    grpo = json.loads(grpo_path.read_text()) if grpo_path.is_file() else {}
    for a in TARGETS:
        key = f"ratio_time_to_reward_{str(a).replace('.', '_')}"
        grpo[key] = summary[str(a)]["ratio"]
        grpo[key + "_kind"] = summary[str(a)]["ratio_kind"]
        grpo[key + "_interpolated"] = interpolated[str(a)]["ratio"]
    grpo["time_to_reward_source"] = "bench/results/time_to_reward.json (held-out accuracy, seeds a side)"
    grpo_path.write_text(json.dumps(grpo, indent=1))
    for a in map(str, TARGETS):
        s = summary[a]
        if "sides" not in s:
            print(f"to held-out {a}: {s['ratio_kind']}")
            continue
        sides = "  ".join(
            f"{n} {v['mean_seconds']:.0f} s ({v['reached']}/{len(v['seconds'])})" for n, v in s["sides"].items()
        )
        ratio = f"{s['ratio']:.2f}x ({s['ratio_kind']})" if s["ratio"] else s["ratio_kind"]
        print(f"to held-out {a}: {sides}  ratio {ratio}")


if __name__ == "__main__":
    main()
