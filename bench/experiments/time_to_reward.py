"""Time to a held-out accuracy: Tempering GRPO against TRL's `GRPOTrainer`, paired seeds.

Users of RL care about the time to a reward level, not completions per second. Both sides are
set up alike by bench/_shared/grpo_sides.py (the default model + LoRA r16, built-in 2-digit
addition, the composite reward of examples/grpo_arith.yaml, 8 prompts x 8 samples, <= 32 new
tokens, lr 2e-4, token-mean clip 0.2, TRL at its fastest setting here, both in the precision
`auto` resolves to) and start from the same weights (`--start`: the default model, or a model
directory such as an exported SFT).

Per seed, one run a side, alone and one after the other at `--threads` torch threads (the side
that goes first alternates between seeds: `_shared/harness.py: paired_seeds`; the same seed gives
both sides the same prompt order within each side's own shuffling). A run trains up to `--steps`
optimizer steps or `--minutes` of wall clock and saves its LoRA adapter every `--mark-steps`
steps, with the training seconds so far (the save is off the clock). Afterwards each saved
adapter is scored by Tempering's evaluator (`temper eval run`, greedy, 32 new tokens) on
`--heldout` held-out additions (the held-out split, disjoint from training), in step order, until
one reaches `--up-to`. Per run: steps and seconds to 0.5 (the first mark at or above it; also the
straight-line crossing between marks) and to 0.7 where reached.

    python bench/experiments/time_to_reward.py [--seeds 0 1 2 3 4] [--steps 60] [--mark-steps 5]
        [--heldout 500] [--minutes 30] [--work /tmp/ttr] [--results FILE]
    python bench/experiments/time_to_reward.py --quick     # tiny random model, no learning: plumbing only

Writes bench/results/time_to_reward.json through the harness: host, rounds (one per seed and
side), `ratio_median` / `ratio_ci` = TRL's seconds to 0.5 over Tempering's, paired by seed (above
1: Tempering is faster; a seed where a side never reached 0.5 is dropped and counted), and
`ratio_seconds_to_0_5_ci_low`, `seeds_per_side`, `heldout_items`, per-side medians with intervals.
Training and scoring are resumable: a finished run (its `marks.json`) or score (`results.json`) is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.grpo_sides import Shape, run_tempering, run_trl  # noqa: E402
from _shared.harness import add_round_arguments, host, paired_seeds, write_result  # noqa: E402
from _shared.paths import RESULTS, ROOT  # noqa: E402

TARGETS = (0.5, 0.7)
SIDES = ("tempering", "trl")
QUICK_OUT = Path("/tmp/ttr_quick")


def heldout_tasks(n: int) -> dict:
    return {"source": "builtin:arithmetic", "ops": "+", "split": "heldout", "n": n, "seed": 0}


# ------------------------------------------------------------------------------------ training


def child(side: str, shape: Shape, steps: int, minutes: float, mark_steps: int, out: Path) -> None:
    """Train one run, saving the adapter every `mark_steps` optimizer steps (and at the last) with
    the training seconds so far; writes out/marks.json."""
    from tempering.models.lora import loadable_base

    marks: list[dict] = []
    budget, base, done = minutes * 60, loadable_base(shape.model), [0]

    def on_step(model, seconds: float) -> bool:
        done[0] += 1
        stop = seconds >= budget or done[0] >= steps
        if done[0] % mark_steps == 0 or stop:
            path = out / f"mark-{done[0]:04d}"
            model.save_pretrained(str(path))
            config = path / "adapter_config.json"  # the same base on both sides, by the spec eval loads
            config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": base}))
            marks.append({"step": done[0], "seconds": seconds, "adapter": str(path)})
        return stop

    run = run_tempering if side == "tempering" else run_trl
    result = run(shape, steps, 0, on_step=on_step)
    (out / "marks.json").write_text(json.dumps({"marks": marks, "run": result}, default=str))


def train(side: str, seed: int, args: argparse.Namespace) -> Path:
    """One run in a fresh process (alone: the caller runs them one after another); its folder."""
    out = args.work / f"{side}-seed{seed}"
    if (out / "marks.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--child", side, "--seed", str(seed), "--steps", str(args.steps)]
    cmd += ["--minutes", str(args.minutes), "--mark-steps", str(args.mark_steps), "--threads", str(args.threads)]
    cmd += ["--work", str(args.work), "--start", args.start]
    with open(out / "train.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0 or not (out / "marks.json").is_file():
        raise SystemExit(f"{side} seed {seed}: training exited {rc} (see {out / 'train.log'})")
    return out


# ------------------------------------------------------------------------------------- scoring


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


def curve(run_dir: Path, suite: Path, threads: int, start_accuracy: float, up_to: float) -> dict:
    """A run's held-out accuracy at each mark, in step order, up to the first at `up_to`; its
    steps and seconds to each target (`reached`: the first mark at it; `crossing`: interpolated)."""
    marks = json.loads((run_dir / "marks.json").read_text())
    points = [{"step": 0, "seconds": 0.0, "accuracy": start_accuracy}]
    for m in marks["marks"]:
        acc = score(m["adapter"], run_dir / f"eval-{m['step']:04d}", suite, threads)
        points.append({"step": m["step"], "seconds": m["seconds"], "accuracy": acc})
        print(f"  {run_dir.name} step {m['step']:4d} {m['seconds']:7.0f} s: {acc:.3f}", flush=True)
        if acc >= up_to:
            break
    out: dict = {"points": points, "steps_trained": len(marks["run"]["rewards"]), "run": marks["run"]}
    for a in (t for t in TARGETS if t <= up_to):  # above `up_to` the marks were not all scored
        key = str(a).replace(".", "_")
        first = next((p for p in points if p["accuracy"] >= a), None)
        out[f"steps_to_{key}"] = None if first is None else first["step"]
        out[f"seconds_to_{key}"] = None if first is None else first["seconds"]
        out[f"seconds_to_{key}_crossing"] = crossing(points, a)
    return out


def crossing(points: list[dict], target: float) -> float | None:
    """Training seconds where the straight line between the last mark below `target` and the first
    at or above it crosses `target` (None: never reached). The first mark alone over-states the time
    by up to one mark interval; the line takes most of that quantisation out, on both sides alike."""
    for before, after in zip(points, points[1:]):
        if before["accuracy"] < target <= after["accuracy"]:
            rise = after["accuracy"] - before["accuracy"]
            return before["seconds"] + (after["seconds"] - before["seconds"]) * (target - before["accuracy"]) / rise
    return 0.0 if points and points[0]["accuracy"] >= target else None


# --------------------------------------------------------------------------------- the result


def side_interval(values: list[float | None]) -> dict:
    """Median over seeds with a 95% bootstrap interval (seeds that never reached it counted apart)."""
    import numpy as np

    from tempering.evals.stats import bootstrap_statistic

    got = [float(v) for v in values if v is not None]
    out: dict = {"values": values, "reached": len(got), "runs": len(values)}
    if len(got) >= 2:
        est = bootstrap_statistic(np.median, np.array(got), level=0.95, resamples=4000, seed=0)
        out.update(median=est.mean, ci=[est.low, est.high])
    elif got:
        out.update(median=got[0], ci=None)
    return out


def summary(records: list[dict], up_to: float) -> dict:
    """Per side and target: steps and seconds with intervals; the paired ratio of seconds per target."""
    from _shared.harness import ratio

    out: dict = {}
    for a in (t for t in TARGETS if t <= up_to):
        key = str(a).replace(".", "_")
        sides = {
            side: {
                what: side_interval([r["result"].get(f"{what}_to_{key}") for r in records if r["side"] == side])
                for what in ("steps", "seconds")
            }
            for side in SIDES
        }
        try:
            paired = ratio(records, "tempering", "trl", f"seconds_to_{key}", higher_is_better=False)
        except ValueError as exc:
            paired = {"ratio_median": None, "ratio_ci": None, "reason": str(exc)}
        out[key] = {"sides": sides, "ratio_seconds": paired}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=60, help="most optimizer steps a run")
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock training cap a run")
    p.add_argument("--mark-steps", type=int, default=5, help="optimizer steps between saved adapters")
    p.add_argument("--heldout", type=int, default=500, help="held-out additions scored at each mark")
    p.add_argument("--start", default=Shape.model, help="the weights both sides start from")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/ttr"))
    p.add_argument("--up-to", type=float, default=max(TARGETS), help="score marks until this accuracy")
    p.add_argument("--results", type=Path, default=RESULTS / "time_to_reward.json")
    p.add_argument("--quick", action="store_true", help="a tiny random model, 2 seeds, 4 steps: plumbing only")
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    add_round_arguments(p)
    args = p.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        out = args.work / f"{args.child}-seed{args.seed}"
        child(args.child, Shape(model=args.start, seed=args.seed), args.steps, args.minutes, args.mark_steps, out)
        return
    if args.quick:
        shapes = QUICK_OUT / "shapes"
        if not (shapes / "tiny").is_dir():
            subprocess.run(
                [sys.executable, str(ROOT / "bench/_shared/model_shapes.py"), str(shapes), "tiny"], check=True
            )
        args.start, args.seeds, args.steps, args.mark_steps, args.heldout = str(shapes / "tiny"), [0, 1], 4, 2, 8
        args.work, args.results, args.minutes = QUICK_OUT / "work", QUICK_OUT / "time_to_reward.json", 5.0
    if args.mark_steps <= 0 or args.steps <= 0 or args.minutes <= 0:
        p.error("--steps, --minutes and --mark-steps must be positive")
    args.work.mkdir(parents=True, exist_ok=True)
    suite = args.work / f"suite-heldout-add-{args.heldout}.yaml"
    suite.write_text(
        json.dumps(
            {
                "name": "heldout-add",
                "track": "reasoning",
                "description": f"{args.heldout} held-out 2-digit additions (disjoint from training), final answer",
                "tasks": heldout_tasks(args.heldout),
                "templates": ["{prompt}"],
                "sampling": {"temperature": 0.0, "n": 1, "max_new_tokens": 32},
                "metrics": ["accuracy"],
                "seeds": 1,
            }
        )
    )
    runs = {}

    def run(side: str, seed: int) -> dict:
        runs[(side, seed)] = train(side, seed, args)  # timed alone; scoring waits until every run is done
        return {}

    records = paired_seeds(run, list(SIDES), args.seeds)
    start = score(args.start, args.work / f"eval-start-{args.heldout}", suite, args.threads)
    print(f"start: held-out accuracy {start:.3f}", flush=True)
    for r in records:
        r["result"] = curve(runs[(r["side"], r["seed"])], suite, args.threads, start, args.up_to)
    targets = summary(records, args.up_to)
    half = targets["0_5"]["ratio_seconds"]
    from tempering.models.precision import resolve_precision

    machine = host(resolve_precision("auto"), threads=args.threads)
    extra = {
        "command": "python bench/experiments/time_to_reward.py " + " ".join(sys.argv[1:]),
        "quick": args.quick,
        "start": args.start,
        "start_accuracy": start,
        "shape": vars(Shape(model=args.start)),
        "heldout": heldout_tasks(args.heldout),
        "heldout_items": args.heldout,
        "seeds_per_side": len(args.seeds),
        "budget": {"steps": args.steps, "minutes": args.minutes, "mark_steps": args.mark_steps},
        "clock": "training seconds (each side's own step clock; adapter saves and scoring off it)",
        "ratio_definition": "TRL seconds to held-out 0.5 over Tempering's, paired by seed (above 1: Tempering faster)",
        "ratio_seconds_to_0_5_ci_low": (half.get("ratio_ci") or [None])[0],
        "targets": targets,
    }
    try:
        write_result(
            args.results,
            benchmark="time_to_reward",
            host=machine,
            rounds=records,
            candidate="tempering",
            baseline="trl",
            metric="seconds_to_0_5",
            higher_is_better=False,
            max_load=args.max_load,
            extra=extra,
        )
    except ValueError as exc:  # no seed reached 0.5 on both sides: the figures, no ratio, not a headline
        nothing = {"ratio_median": None, "ratio_ci": None, "headline": False, "headline_refused": str(exc)}
        result = {**extra, "benchmark": "time_to_reward", "host": machine, **nothing, "rounds": records}
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"time_to_reward: not a headline: {exc}")
    for key, t in targets.items():
        line = "  ".join(
            f"{side} {v['seconds'].get('median', float('nan')):.0f} s ({v['seconds']['reached']}/{v['seconds']['runs']})"
            for side, v in t["sides"].items()
        )
        r = t["ratio_seconds"]
        shown = f"{r['ratio_median']:.2f}x {r['ratio_ci']}" if r.get("ratio_median") else r.get("reason")
        print(f"to held-out {key.replace('_', '.')}: {line}  ratio {shown}")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
