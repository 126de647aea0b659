"""GRPO-family variants side by side: held-out 2-digit addition from the same SFT start, equal wall clock.

    python bench/experiments/rl_variants.py [--minutes 3] [--seeds 0 1 2] [--variants grpo dapo ...]

1. The SFT start: `temper sft` on examples/data/arith_train.jsonl (LoRA, a few steps: the format
   and some skill, far from solved), made once under --out and shared by every run.
2. For each variant, its three seeds run side by side (one torch thread each), each
   `temper grpo` from that start with `train.max_minutes` = --minutes: the same wall-clock budget,
   so a variant that spends more per step (DAPO's refills) takes fewer steps. Held-out greedy
   final-answer accuracy on --heldout disjoint problems every --every steps and at the end.
3. Per variant: the final accuracy over seeds (mean, a 95% t-interval over the seeds, and a 95%
   bootstrap interval over problems, each problem's verdict averaged over the seeds first:
   `tempering.evals.stats`, as evals compute it), steps taken, and the curves; the plot
   of held-out accuracy against wall-clock seconds goes to docs/img_rl_variants.png.

The variants differ only in what defines them (docs/rl.md):
  grpo     loss grpo (seq_mean), advantage grpo, clip 0.2 / 0.2
  dapo     loss dapo (token_mean), clip-higher 0.28, dynamic sampling, overlong filtering
           (truncation: mask) and soft overlong shaping (overlong_buffer)
  dr_grpo  loss dr_grpo (constant), advantage dr_grpo (no std)
  gspo     loss gspo (sequence ratio), clip 3e-4 / 4e-4 (the paper's)
  cispo    loss cispo, weight cap 1 + 4.0 (ScaleRL's epsilon_max 5)
  rloo     advantage rloo, loss grpo
Every variant takes two updates per rollout batch (updates_per_batch 2), so the ratios leave 1
and the variants' clipping rules act. The machine is shared: the load average is recorded
before, during (sampled every 30 s) and after, and the figures are as loaded as it was.

Writes bench/results/rl_variants.json (`variants`: how many ran; per variant the final accuracy).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

VARIANTS: dict[str, dict] = {
    "grpo": {"loss": "grpo", "advantage": "grpo", "clip_high": 0.2, "dynamic_sampling": False},
    "dapo": {
        "loss": "dapo",
        "advantage": "grpo",
        "clip_high": 0.28,
        "dynamic_sampling": True,
        "max_refills": 1,
        "truncation": "mask",
        "overlong_buffer": 4,
    },
    "dr_grpo": {"loss": "dr_grpo", "advantage": "dr_grpo", "clip_high": 0.2, "dynamic_sampling": False},
    "gspo": {"loss": "gspo", "advantage": "grpo", "clip_low": 3e-4, "clip_high": 4e-4, "dynamic_sampling": False},
    "cispo": {"loss": "cispo", "advantage": "grpo", "clip_high": 4.0, "dynamic_sampling": False},
    "rloo": {"loss": "grpo", "advantage": "rloo", "clip_high": 0.2, "dynamic_sampling": False},
}


def temper() -> str:
    return str(Path(sys.executable).parent / "temper")


def env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}


def sft_start(out: Path, steps: int) -> Path:
    """The shared SFT start (made once; reused when its final dir exists)."""
    final = out / "sft-start" / "final"
    if final.is_dir():
        return final
    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 16, "alpha": 32},
        "data": {"train": [str(ROOT / "examples" / "data" / "arith_train.jsonl")], "max_length": 128, "packing": True},
        "train": {"steps": steps, "batch_size": 8, "optim": {"lr": 1.0e-3, "warmup_steps": 2, "schedule": "cosine"}},
        "out": str(out),
        "name": "sft-start",
    }
    path = out / "sft-start.yaml"
    path.write_text(yaml.safe_dump(cfg))
    print(f"SFT start: {steps} steps ...", flush=True)
    subprocess.run([temper(), "sft", str(path), "--force"], check=True, env=env(), cwd=ROOT)
    return final


def grpo_config(variant: str, start: Path, out: Path, args: argparse.Namespace) -> Path:
    cfg = {
        "model": str(start),
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 2000, "seed": 0, "split": "train"},
        "heldout": {
            "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": args.heldout, "seed": 0, "split": "heldout"},
            "max_new_tokens": 16,
        },
        "reward": [
            {"name": "correct", "weight": 1.0, "verifier": {"type": "numeric"}},
            {"name": "strict", "weight": 1.0, "verifier": {"type": "exact"}},
            {"name": "close", "weight": 0.25, "verifier": {"type": "numeric_close", "scale": 10}},
        ],
        "grpo": {
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "max_new_tokens": 10,
            "generation_chunks": 1,
            "temperature": 1.0,
            "truncation": "penalty",
            "updates_per_batch": 2,
            **VARIANTS[variant],
        },
        "train": {
            "steps": 1000,
            "eval_every": args.every,
            "max_minutes": args.minutes,
            "optim": {"lr": 2.0e-4, "schedule": "constant", "warmup_steps": 0},
            "checkpoint": {"every": 1000, "keep_last": 1},
        },
        "out": str(out),
    }
    path = out / f"{variant}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def launch(config: Path, variant: str, seed: int, out: Path) -> subprocess.Popen:
    name = f"{variant}-seed{seed}"
    cmd = [temper(), "grpo", str(config), "--name", name, "--force"]
    cmd += ["--set", f"train.seed={seed}", "--set", "train.threads=1"]
    log = open(out / f"{name}.log", "w")
    return subprocess.Popen(["nice", "-n", "10", *cmd], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env())


def final_verdicts(run_dir: Path) -> dict[str, float]:
    """The per-problem `correct` verdicts of the run's last held-out evaluation, by task id."""
    steps = sorted((run_dir / "heldout").glob("step-*"))
    for f in sorted(steps[-1].rglob("*.jsonl")) if steps else []:
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        values = {r.get("task_id", str(i)): _correct(r) for i, r in enumerate(rows)}
        if values and all(v is not None for v in values.values()):
            return {k: float(v) for k, v in values.items()}  # type: ignore[arg-type]
    return {}


def _correct(row: dict) -> float | None:
    for key in ("components", "reward_components"):
        if isinstance(row.get(key), dict) and "correct" in row[key]:
            return row[key]["correct"]
    return None


def summarise(variant: str, seeds: list[int], out: Path) -> dict:
    from tempering.evals.stats import bootstrap_ci, t_interval

    runs: dict = {}
    finals: list[float] = []
    verdicts: dict[str, list[float]] = {}  # task id -> its verdict in each seed
    for s in seeds:
        run_dir = out / f"{variant}-seed{s}"
        summary = json.loads((run_dir / "summary.json").read_text())
        history = summary["heldout_history"]
        curve = [{"step": h["step"], "correct": h.get("correct"), "eval_s": h.get("eval_s")} for h in history]
        runs[s] = {
            "steps": summary["steps"],
            "seconds": summary.get("seconds"),
            "before": summary["heldout_before"].get("correct"),
            "after": summary["heldout_after"].get("correct"),
            "curve": curve,
        }
        finals.append(summary["heldout_after"]["correct"])
        for task, verdict in final_verdicts(run_dir).items():
            verdicts.setdefault(task, []).append(verdict)
    over_seeds = t_interval(finals) if len(finals) > 1 else None
    over_tasks = bootstrap_ci(list(verdicts.values())) if verdicts else None
    return {
        "final_accuracy": statistics.fmean(finals),
        "final_accuracy_seeds": finals,
        "ci95_over_seeds": [over_seeds.low, over_seeds.high] if over_seeds else [math.nan, math.nan],
        "ci95_bootstrap_tasks": [over_tasks.low, over_tasks.high] if over_tasks else [math.nan, math.nan],
        "n_verdicts": sum(len(v) for v in verdicts.values()),
        "n_tasks": len(verdicts),
        "steps_mean": statistics.fmean(r["steps"] for r in runs.values()),
        "settings": VARIANTS[variant],
        "runs": runs,
    }


class LoadSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(30):
            self.samples.append(os.getloadavg()[0])


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        runs = list(r["runs"].values())
        n = min(len(x["curve"]) for x in runs)
        steps = [statistics.fmean(x["curve"][i]["step"] for x in runs) for i in range(n)]
        acc = [statistics.fmean(x["curve"][i]["correct"] for x in runs) for i in range(n)]
        ax[0].plot(steps, acc, marker="o", label=name)
        lo, hi = r["ci95_over_seeds"]
        ax[1].errorbar(
            [name],
            [r["final_accuracy"]],
            yerr=[[r["final_accuracy"] - lo], [hi - r["final_accuracy"]]],
            fmt="o",
            capsize=4,
        )
    ax[0].set(title="held-out final-answer accuracy (mean of 3 seeds)", xlabel="step", ylabel="accuracy")
    ax[0].legend()
    ax[1].set(title="final accuracy, 95% t-interval over seeds", ylabel="accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=3.0, help="train.max_minutes of every run (equal wall clock)")
    p.add_argument("--sft-steps", type=int, default=12)
    p.add_argument("--heldout", type=int, default=50, help="held-out problems")
    p.add_argument("--every", type=int, default=5, help="held-out evaluation every this many steps")
    p.add_argument("--prompts", type=int, default=4, help="grpo.prompts_per_step")
    p.add_argument("--group", type=int, default=6, help="grpo.group_size")
    p.add_argument("--out", default=str(ROOT / "runs" / "rl-variants"))
    p.add_argument("--plot", default=str(ROOT / "docs" / "img_rl_variants.png"))
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, load_before = time.time(), os.getloadavg()
    sampler = LoadSampler()
    sampler.start()
    start = sft_start(out, args.sft_steps)
    results = {}
    for variant in args.variants:
        config = grpo_config(variant, start, out, args)
        print(f"{variant}: seeds {args.seeds} side by side, {args.minutes} min each ...", flush=True)
        procs = [launch(config, variant, s, out) for s in args.seeds]
        codes = [pr.wait() for pr in procs]
        if any(codes):
            raise SystemExit(f"{variant} failed with exit codes {codes}; see {out}/{variant}-seed*.log")
        results[variant] = summarise(variant, args.seeds, out)
        r = results[variant]
        lo, hi = r["ci95_over_seeds"]
        print(
            f"  final {r['final_accuracy']:.3f} [{lo:.3f}, {hi:.3f}] over seeds {r['final_accuracy_seeds']}, "
            f"{r['steps_mean']:.1f} steps; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    sampler.stop.set()
    before = next(iter(results.values()))["runs"][args.seeds[0]]["before"] if results else None
    result = {
        "benchmark": "rl_variants",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "variants": len(results),
        "task": "builtin:arithmetic ops '+', held-out split, greedy final-answer accuracy (reward part `correct`)",
        "sft_start": {"steps": args.sft_steps, "heldout_accuracy": before},
        "budget": {
            "train_max_minutes": args.minutes,
            "seeds": args.seeds,
            "parallel": "the seeds of one variant side by side, one torch thread each",
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "updates_per_batch": 2,
            "heldout_problems": args.heldout,
            "heldout_every": args.every,
        },
        "load_average": {
            "before": load_before,
            "during_1min_samples": sampler.samples,
            "after": os.getloadavg(),
            "note": "the machine (2 cores) was shared with other work the whole time: absolute steps are load-bound",
        },
        "wall_s": time.time() - t0,
        "final_accuracy": {
            name: {k: r[k] for k in ("final_accuracy", "ci95_over_seeds", "ci95_bootstrap_tasks", "steps_mean")}
            for name, r in results.items()
        },
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rl_variants.json").write_text(json.dumps(result, indent=1))
    if results:
        plot(results, Path(args.plot))
    for name, r in results.items():
        lo, hi = r["ci95_over_seeds"]
        print(f"{name:8} final {r['final_accuracy']:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  steps {r['steps_mean']:.1f}")


if __name__ == "__main__":
    main()
