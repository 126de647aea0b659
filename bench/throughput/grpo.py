"""GRPO throughput and time-to-reward: Tempering vs TRL's GRPOTrainer, side by side in one run.

Same model (the default, LoRA r=16 alpha=32 on all linear layers of every block, same
initial adapter seed), same task (built-in 2-digit addition, train split), same reward (the
composite of examples/grpo_arith.yaml, computed by Tempering's verifiers for both), 8 prompts
x 8 samples per step, at most 32 new tokens, temperature 1, beta = 0, one update per rollout
batch, learning rate 2e-4 constant, no dynamic sampling on the Tempering side (TRL has none).
Precision: "auto" for both -- bf16 only where the CPU has native bf16; on an AVX2-only CPU
bf16 matmul is emulated (~400x slower than fp32 here) and both run fp32.

The two sides are set up in bench/_shared/grpo_sides.py (shared with
experiments/time_to_reward.py). Tempering samples with its default engine (continuous batching,
`BatchingEngine`). TRL runs
at its fastest settings found here: `gradient_checkpointing=False` (GRPOConfig's default True
recomputes the forward); `--trl-sweep` measures s/step of TRL under each setting of
`TRL_SWEEP` and records them (bench/results/grpo_trl_sweep.json).

Rounds (bench/_shared/harness.py): every side runs once a round in a fresh process, the sides
interleaved, `--warmup-rounds` first and not counted, then `--rounds` timed rounds. Reported per
side (medians of its rounds, with the per-round values): completions/s over the timed steps
(generation + scoring + update, everything a step does, after `--warmup` steps), the first
round's reward curve, and the first step / wall second at which the step's mean reward reached
0.5 (null when not reached within `--steps`). The headline is tempering over trl in
completions/s, paired by round, with a bootstrap interval of the median ratio. `--quick` is a
smoke run (never a headline).

    python bench/throughput/grpo.py [--steps 6] [--warmup 1] [--threads 2] [--rounds 5 --warmup-rounds 1]
        [--model DIR] [--sides tempering,trl] [--prompts 8 --group 8 --max-new-tokens 32] [--results FILE] [--quick]

Sides: `tempering` and `trl` (LoRA, as above) and `tempering_full` (full parameters, no TRL
twin). On a GPU both frameworks train and sample on it; `--model` takes any model directory,
e.g. a random-weight shape from bench/_shared/model_shapes.py (bench/gpu/run.sh does this: its
completions then run to the token limit, so the figures are throughput, not learning).

Writes bench/results/grpo.json (or --results) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared import harness  # noqa: E402
from _shared.grpo_sides import TRL_FASTEST, TRL_SWEEP, Shape, run_tempering, run_trl  # noqa: E402
from _shared.paths import RESULTS  # noqa: E402

SIDES = ("tempering", "tempering_full", "trl")
QUICK = {"steps": 2, "warmup": 1, "prompts": 2, "group": 2, "max_new_tokens": 8, "rounds": 1, "warmup_rounds": 0}
"""`--quick`: the smallest run that goes through every part (a smoke check, never a headline)."""


def run_child_side(side: str, shape: dict, steps: int, warmup: int, threads: int) -> dict:
    """One side's timed steps (in the fresh process `harness.call_in_subprocess` starts)."""
    import torch

    torch.set_num_threads(threads)
    bench_shape = Shape(**shape)
    if side == "trl":
        return run_trl(bench_shape, steps, warmup, None)
    return run_tempering(bench_shape, steps, warmup, lora=side == "tempering")


def run_side(side: str, args: argparse.Namespace, shape: Shape) -> dict:
    """One side in its own process; a failure (exit status, time-out) is recorded, not raised."""
    kwargs = {
        "side": side,
        "shape": dataclasses.asdict(shape),
        "steps": args.steps,
        "warmup": args.warmup,
        "threads": args.threads,
    }
    try:
        return harness.call_in_subprocess(Path(__file__), "run_child_side", kwargs, timeout_s=args.side_timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"failed": str(exc)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default=Shape.model, help="alias or model directory")
    p.add_argument("--sides", default="tempering,trl", help="comma-separated, from " + ", ".join(SIDES))
    p.add_argument("--prompts", type=int, default=Shape.prompts)
    p.add_argument("--group", type=int, default=Shape.group)
    p.add_argument("--max-new-tokens", type=int, default=Shape.max_new_tokens)
    p.add_argument("--results", type=Path, default=RESULTS / "grpo.json")
    p.add_argument("--side-timeout", type=float, default=1800, help="seconds one side's process may run")
    p.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    harness.add_round_arguments(p)
    p.add_argument("--child", choices=SIDES)
    p.add_argument("--trl-settings", default=None, help="child only: JSON of TRL GRPOConfig settings")
    p.add_argument("--trl-sweep", action="store_true", help="time TRL under each TRL_SWEEP setting instead")
    p.add_argument("--out")
    args = p.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    bench_shape = Shape(args.model, args.prompts, args.group, args.max_new_tokens)
    shape = [f"--model={args.model}", f"--prompts={args.prompts}", f"--group={args.group}"]
    shape.append(f"--max-new-tokens={args.max_new_tokens}")
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        if args.child == "trl":
            settings = json.loads(args.trl_settings) if args.trl_settings else None
            result = run_trl(bench_shape, args.steps, args.warmup, settings)
        else:
            result = run_tempering(bench_shape, args.steps, args.warmup, lora=args.child == "tempering")
        Path(args.out).write_text(json.dumps(result, default=str))
        return
    if args.trl_sweep:
        sweep = []
        for settings in TRL_SWEEP:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        "trl",
                        "--out",
                        out.name,
                        f"--steps={args.steps}",
                        f"--warmup={args.warmup}",
                        f"--threads={args.threads}",
                        f"--trl-settings={json.dumps(settings)}",
                        *shape,
                    ],
                    check=True,
                )
                r = json.loads(Path(out.name).read_text())
            sweep.append(
                {
                    "settings": settings,
                    "seconds_per_step": r["seconds"] / max(r["timed_steps"], 1),
                    "completions_per_s": r["completions_per_s"],
                }
            )
            print(sweep[-1], flush=True)
        (RESULTS / "grpo_trl_sweep.json").write_text(
            json.dumps(
                {
                    "benchmark": "grpo TRL settings sweep",
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "steps": args.steps,
                    "warmup_steps": args.warmup,
                    "torch_threads": args.threads,
                    "load_average_at_end": os.getloadavg(),
                    "sweep": sweep,
                },
                indent=1,
            )
        )
        return
    sides = args.sides.split(",")
    if "trl" not in sides or "tempering" not in sides or set(sides) - set(SIDES):
        p.error(f"--sides needs tempering and trl, from {', '.join(SIDES)}; got {args.sides!r}")
    records = harness.interleave(
        {n: (lambda n=n: run_side(n, args, bench_shape)) for n in sides}, rounds=args.rounds, warmup=args.warmup_rounds
    )
    runs = {n: harness.side_summary(records, n, "completions_per_s") for n in sides}
    if any(runs[n].get("completions_per_s") is None for n in ("tempering", "trl")):
        sys.exit(f"no ratio: tempering and trl must run; {runs}")
    ours, peer = runs["tempering"], runs["trl"]
    # ratios of the sides' medians (the headline ratio_median / ratio_ci pair rounds)
    ratio = ours["completions_per_s"] / peer["completions_per_s"]
    to_reward = {n: harness.side_summary(records, n, "seconds_to_reward_0_5") for n in ("tempering", "trl")}
    t_ratio = (
        to_reward["trl"]["seconds_to_reward_0_5"] / to_reward["tempering"]["seconds_to_reward_0_5"]
        if to_reward["tempering"].get("seconds_to_reward_0_5") and to_reward["trl"].get("seconds_to_reward_0_5")
        else None
    )
    result = {
        "model": f"{bench_shape.model} + LoRA r16 all-linear"
        + (" (tempering_full: full parameters)" if "tempering_full" in runs else ""),
        "device": ours["device"],
        "task": "builtin:arithmetic ops=+ (train split)",
        "reward": "examples/grpo_arith.yaml composite (correct + strict + 0.25 close + 0.5 close_bare)",
        "prompts_per_step": bench_shape.prompts,
        "group_size": bench_shape.group,
        "max_new_tokens": bench_shape.max_new_tokens,
        "beta": 0.0,
        "updates_per_batch": 1,
        "lr": bench_shape.lr,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "torch_threads": args.threads,
        "tempering_engine": "BatchingEngine (EngineSettings() default: continuous batching)",
        "trl_settings": TRL_FASTEST,
        "trl_settings_swept": [s for s in TRL_SWEEP],
        "machine_note": (
            "2 cores; run alone under /work/bench.lock (load average recorded per round)"
            if ours["device"] == "cpu"
            else "one GPU, the sides one after the other"
        ),
        "ratio_completions_per_s": ratio,
        "ratio_generated_tokens_per_s": (
            ours["generated_tokens_per_s"] / peer["generated_tokens_per_s"]
            if ours.get("generated_tokens_per_s") and peer.get("generated_tokens_per_s")
            else None
        ),
        "ratio_completions_per_s_full_vs_trl_lora": (
            runs["tempering_full"]["completions_per_s"] / peer["completions_per_s"]
            if "tempering_full" in runs
            else None
        ),
        "target_ratio": 3.0,
        "ratio_time_to_reward_0_5": t_ratio,
        "target_time_ratio": 2.0,
        "runs": runs,
    }
    written = harness.write_result(
        args.results,
        benchmark="grpo",
        host=harness.host(ours.get("precision"), args.threads),
        rounds=records,
        candidate="tempering",
        baseline="trl",
        metric="completions_per_s",
        max_load=args.max_load,
        extra=result,
    )
    print(
        f"\nGRPO, {bench_shape.prompts}x{bench_shape.group} per step, <= {bench_shape.max_new_tokens} new tokens, "
        f"precision {ours['precision']}, medians of {written['paired_rounds']} rounds"
    )
    print(f"{'':12}{'compl/s':>10}{'s/step':>10}{'steps->0.5':>12}{'s->0.5':>10}  rewards")
    for name, r in runs.items():
        if "completions_per_s" not in r:
            print(f"{name:12}failed: {r['failed']}")
            continue
        per = r["seconds"] / max(r["timed_steps"], 1)
        print(
            f"{name:12}{r['completions_per_s']:10.2f}{per:10.1f}{str(r['steps_to_reward_0_5']):>12}"
            f"{str(round(r['seconds_to_reward_0_5'] or 0)) if r['seconds_to_reward_0_5'] else 'n/a':>10}  "
            + " ".join(f"{x:.2f}" for x in r["rewards"])
        )
    low, high = written["ratio_ci"]
    print(
        f"ratio completions/s tempering / trl: median {written['ratio_median']:.2f}x [{low:.2f}, {high:.2f}]"
        f"{' (parity)' if written['parity'] else ''} (target 3x), generated tokens/s "
        f"{result['ratio_generated_tokens_per_s'] or float('nan'):.2f}x; time to reward 0.5: "
        + (f"{t_ratio:.2f}x" if t_ratio else "not reached by both within the run")
        + " (target 2x)"
    )


if __name__ == "__main__":
    main()
