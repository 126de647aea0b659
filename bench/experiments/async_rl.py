"""Asynchronous GRPO against synchronous on this machine: completions/s and time to held-out 0.5.

The sides, all `temper grpo` on examples/grpo_arith.yaml (the default model, LoRA; the example
starts from no SFT), each run alone in a fresh process, one after another:

  sync        grpo.max_off_policy_steps 0, the batching engine in process (the example's default), train.threads 2
  async_k<K>  max_off_policy_steps K (1, 2, 4), the same batching engine in an engine process
              (sampler: {threads: 1}), train.threads 1

Per seed every side runs once, the first side alternating between seeds (`harness.paired_seeds`);
the same seed gives the same prompt order on every side. Each run trains `--steps` steps (or
`--minutes`) and measures held-out greedy final-answer accuracy (`heldout/tasks/correct`, the
example's 100 held-out additions) every `--eval-every` steps.

The clock is the run's own (`read_run`): the Trainer's `step_s` summed over its steps (sampling
waits included; model load, held-out evaluations and checkpoints left out) plus each evaluation's
`eval_wait_s` (an async sampler finishing its batch before the eval may borrow the engine:
sampling work, so it counts). From it, per run: completions/s (trained completions over the
clock), seconds and steps to held-out 0.5 (None when the run's budget ended first), the per-step
`staleness_hist/<k>` and the stale-dropped share.

Also, once per invocation: `sync_equivalence_max_abs_diff`, two short K = 0 runs from the same
seed, the batching engine in process against the same engine in the engine process (both one
torch thread): the largest
absolute difference over per-step loss, grad norm, reward mean and the final adapter weights.

    python bench/experiments/async_rl.py [--seeds 0 1 2 3 4] [--ks 1 2 4] [--steps 50] [--eval-every 5]
    python bench/experiments/async_rl.py --quick        # a smoke run: 1 seed, 3 tiny steps; writes /tmp

Writes bench/results/async_rl.json (through `_shared/harness.py`: host, rounds, ratio_median and
ratio_ci of async_k1 over sync completions/s) and docs/img_async_rl.png.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.harness import add_round_arguments, host, paired_seeds, ratio, write_result  # noqa: E402
from _shared.paths import RESULTS, ROOT  # noqa: E402

THRESHOLD = 0.5
ACCURACY = "heldout/tasks/correct"
"""Held-out final-answer accuracy (the last number in the reply is right), as grpo_learning.json reports."""
EVAL_WAIT = "heldout/tasks/eval_wait_s"
FAULTS = RESULTS / "faults.json"
QUICK_OUT = Path("/tmp/async_rl_quick")


def side_names(ks: Sequence[int]) -> list[str]:
    return ["sync"] + [f"async_k{k}" for k in ks]


def side_k(side: str) -> int:
    return 0 if side == "sync" else int(side.removeprefix("async_k"))


# ------------------------------------------------------------------------- reading a run (pure)


def step_rows(rows: Sequence[dict]) -> list[dict]:
    """The Trainer's step records of a metrics.jsonl (events and other rows left out)."""
    return [r for r in rows if "event" not in r and "loss" in r and "step_s" in r]


def staleness_hist(row: dict) -> dict[int, float]:
    """A step's `staleness_hist/<k>`: sampled tokens k steps old when trained."""
    prefix = "staleness_hist/"
    return {int(k.removeprefix(prefix)): v for k, v in row.items() if k.startswith(prefix)}


def read_run(rows: Sequence[dict], group_size: int, threshold: float = THRESHOLD) -> dict:
    """One run's figures from its metrics.jsonl rows (see the module docstring for the clock).

    Args:
        rows: every record of the run's metrics.jsonl, in order.
        group_size: completions per group (trained completions = groups kept x this, less the stale-dropped share).
    Returns: steps, clock_s, completions_per_s (trained), sampled_completions_per_s, the held-out curve
    [{step, seconds, accuracy}], steps_to_0_5 / seconds_to_0_5 (None: not reached), the staleness
    histograms (per step and summed), stale_dropped_share (over the run's groups).
    """
    steps = step_rows(rows)
    evals = {int(r["step"]): r for r in rows if r.get("event") == "eval"}
    clock, at_step, last = 0.0, {0: 0.0}, 0
    for row in steps:
        # an evaluation after the last step held the trainer while the sampler finished its batch
        waits = sum(e.get(EVAL_WAIT, 0.0) for s, e in evals.items() if last <= s < row["step"])
        clock += row["step_s"] + waits
        last = int(row["step"])
        at_step[last] = clock
    trained = [r["groups_kept"] * group_size * (1.0 - r.get("stale_dropped_share", 0.0)) for r in steps]
    sampled = [r["completions"] for r in steps]
    curve = [
        {"step": s, "seconds": at_step[s], "accuracy": e[ACCURACY]}
        for s, e in sorted(evals.items())
        if s in at_step and ACCURACY in e
    ]
    reached = next((p for p in curve if p["accuracy"] >= threshold), None)
    hists = [staleness_hist(r) for r in steps]
    total: dict[int, float] = {}
    for h in hists:
        for k, v in h.items():
            total[k] = total.get(k, 0.0) + v
    return {
        "steps": len(steps),
        "clock_s": clock,
        "completions_per_s": sum(trained) / clock if clock else None,
        "sampled_completions_per_s": sum(sampled) / clock if clock else None,
        "step_s_mean": statistics.fmean(r["step_s"] for r in steps) if steps else None,
        "eval_wait_s": sum(e.get(EVAL_WAIT, 0.0) for e in evals.values()),
        "heldout": curve,
        "accuracy_last": curve[-1]["accuracy"] if curve else None,
        "steps_to_0_5": None if reached is None else reached["step"],
        "seconds_to_0_5": None if reached is None else reached["seconds"],
        "staleness_hist_per_step": [{str(k): v for k, v in sorted(h.items())} for h in hists],
        "staleness_hist": {str(k): v for k, v in sorted(total.items())},
        "staleness_max": max((r.get("staleness_max", 0.0) for r in steps), default=None),
        "stale_dropped_share": statistics.fmean(r.get("stale_dropped_share", 0.0) for r in steps) if steps else None,
    }


# --------------------------------------------------------------------------- the result (pure)


def paired(records: Sequence[dict], side: str, metric: str, *, higher_is_better: bool) -> dict:
    """`side` against sync on `metric`, paired by seed: median ratio and interval, or None and the reason."""
    try:
        r = ratio(records, side, "sync", metric, higher_is_better=higher_is_better)
    except ValueError as exc:
        return {"ratio_median": None, "ratio_ci": None, "reason": str(exc)}
    return {k: r[k] for k in ("ratio_median", "ratio_ci", "ratio_per_round", "paired_rounds", "dropped_rounds")}


def per_side(records: Sequence[dict], side: str) -> dict:
    runs = [r["result"] for r in records if r["side"] == side and not r["warmup"]]
    cps = [r["completions_per_s"] for r in runs if r.get("completions_per_s") is not None]
    return {
        "completions_per_s_median": statistics.median(cps) if cps else None,
        "completions_per_s": cps,
        "steps_to_0_5": [r.get("steps_to_0_5") for r in runs],
        "seconds_to_0_5": [r.get("seconds_to_0_5") for r in runs],
        "staleness_hist": [r.get("staleness_hist") for r in runs],
        "stale_dropped_share": [r.get("stale_dropped_share") for r in runs],
        "failed": [r["failed"] for r in runs if "failed" in r],
    }


def summary_fields(records: Sequence[dict], ks: Sequence[int], equivalence: dict, faults: dict) -> dict:
    """The result's own top-level fields (`write_result` adds host, rounds, ratio_median, ratio_ci)."""
    per_k = {}
    for k in ks:
        side = f"async_k{k}"
        per_k[str(k)] = {
            **per_side(records, side),
            "speedup_completions_per_s": paired(records, side, "completions_per_s", higher_is_better=True),
            # async seconds over sync seconds: "higher is better" makes `ratio` take candidate / baseline
            "time_to_reward_ratio_vs_sync": paired(records, side, "seconds_to_0_5", higher_is_better=True),
        }
    first = per_k[str(ks[0])] if ks else {}
    speed = first.get("speedup_completions_per_s", {})
    ttr = first.get("time_to_reward_ratio_vs_sync", {})
    return {
        "sync_equivalence_max_abs_diff": equivalence.get("max_abs_diff"),
        "sync_equivalence": equivalence,
        "speedup_completions_per_s": speed.get("ratio_median"),
        "speedup_ci_low": (speed.get("ratio_ci") or [None])[0],
        "speedup_k": ks[0] if ks else None,
        "time_to_reward_ratio_vs_sync": ttr.get("ratio_median"),
        "time_to_reward_ratio_ci": ttr.get("ratio_ci"),
        "time_to_reward_ratio_reason": ttr.get("reason"),
        "time_to_reward_ratio_definition": (
            f"median over seeds of async_k{ks[0] if ks else '?'} seconds to held-out {THRESHOLD} over sync's, "
            "paired by seed (below 1: async reaches it sooner); a seed where a side did not reach it is dropped"
        ),
        "sync": per_side(records, "sync"),
        "per_k": per_k,
        "staleness_histograms": {
            side: [r["result"].get("staleness_hist") for r in records if r["side"] == side] for side in side_names(ks)
        },
        **faults,
    }


def faults_fields(path: Path = FAULTS) -> dict:
    """`faults_cases` / `faults_silent` of the fault battery's result, with the file they come from."""
    data = json.loads(path.read_text())
    return {
        "faults_cases": data["faults_cases"],
        "faults_silent": data["faults_silent"],
        "faults_source": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
    }


# --------------------------------------------------------------------------------------- running


def run_config(side: str, seed: int, args: argparse.Namespace, run_root: Path) -> dict:
    """examples/grpo_arith.yaml with the side's engine, K and threads, the bench's budget and eval cadence."""
    import yaml

    cfg = yaml.safe_load((ROOT / "examples" / "grpo_arith.yaml").read_text())
    k = side_k(side)
    cfg.update(out=str(run_root), name=f"{side}-seed{seed}")
    cfg["grpo"]["max_off_policy_steps"] = k
    if k > 0:
        cfg["sampler"] = {"threads": args.sampler_threads}
    cfg["train"].update(
        seed=seed,
        steps=args.steps,
        max_minutes=args.minutes,
        eval_every=args.eval_every,
        threads=args.async_train_threads if k > 0 else 2,
        checkpoint={"every": 100_000, "keep_last": 1},  # a checkpoint waits for the batches sampling ahead
    )
    if args.quick:
        cfg["grpo"].update(prompts_per_step=2, group_size=4, max_new_tokens=8)
        cfg["heldout"]["tasks"]["n"] = 8
        cfg["heldout"]["max_new_tokens"] = 8
    return cfg


def temper_grpo(cfg: dict, run_root: Path, timeout_s: float) -> Path:
    """`temper grpo` on `cfg` in a fresh process (its own session, killed whole past `timeout_s`); the run dir."""
    import yaml

    run_dir = run_root / cfg["name"]
    run_root.mkdir(parents=True, exist_ok=True)
    path = run_root / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "tempering.cli", "grpo", str(path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with open(run_root / f"{cfg['name']}.log", "w") as log:  # this tree's tempering, as `temper grpo`
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the engine process too
            proc.wait(30)
            raise RuntimeError(f"{cfg['name']}: no exit within {timeout_s:.0f} s (killed; see {log.name})") from None
    if rc != 0:
        raise RuntimeError(f"{cfg['name']}: temper grpo exited {rc} (see {run_root / cfg['name']}.log)")
    return run_dir


def run_side(side: str, seed: int, args: argparse.Namespace) -> dict:
    """One run of `side` from `seed`: its figures (`read_run`) and the process's wall seconds; a failure as `failed`."""
    from tempering.tracking.events import metrics_path, read_metrics

    cfg = run_config(side, seed, args, args.work / side)
    t0 = time.perf_counter()
    try:
        run_dir = temper_grpo(cfg, args.work / side, timeout_s=args.minutes * 60 * 2 + 900)
    except RuntimeError as exc:
        return {"failed": str(exc), "completions_per_s": None, "seconds_to_0_5": None}
    figures = read_run(read_metrics(metrics_path(run_dir)), cfg["grpo"]["group_size"])
    return {**figures, "process_wall_s": time.perf_counter() - t0, "run_dir": str(run_dir), "k": side_k(side)}


def equivalence(args: argparse.Namespace, seed: int = 0) -> dict:
    """K = 0 with the example's engine in process against K = 0 with it in the engine process, one thread each, no held-out."""
    from safetensors.torch import load_file

    from tempering.tracking.events import metrics_path, read_metrics

    runs = {}
    for name, extra in (("inprocess", {}), ("process", {"sampler": {"threads": 1}})):
        cfg = run_config("sync", seed, args, args.work / "equivalence")
        cfg.update(name=f"equiv-{name}", heldout=None, **extra)
        cfg["train"].update(steps=args.equivalence_steps, threads=1, eval_every=None, max_minutes=None)
        run_dir = temper_grpo(cfg, args.work / "equivalence", timeout_s=1800)
        rows = step_rows(read_metrics(metrics_path(run_dir)))
        runs[name] = (rows, load_file(run_dir / "final" / "adapter_model.safetensors"))
    (a_rows, a_w), (b_rows, b_w) = runs["inprocess"], runs["process"]
    diffs = {
        key: max(abs(x[key] - y[key]) for x, y in zip(a_rows, b_rows)) for key in ("loss", "grad_norm", "reward_mean")
    }
    diffs["weights"] = max(float((a_w[k].float() - b_w[k].float()).abs().max()) for k in a_w)
    return {
        "max_abs_diff": max(diffs.values()),
        "per_quantity": diffs,
        "steps": len(a_rows),
        "same_steps": len(a_rows) == len(b_rows) and a_w.keys() == b_w.keys(),
        "source": "measured by this bench: K = 0, the batching engine in process vs in the engine process, one torch thread each",
    }


# ------------------------------------------------------------------------------------------ plot


def plot(records: Sequence[dict], ks: Sequence[int], path: Path, title: str = "") -> None:
    """Completions/s per side (median over seeds, 95% bootstrap interval) and held-out accuracy vs clock."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from tempering.evals.stats import bootstrap_statistic

    sides = side_names(ks)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for i, side in enumerate(sides):
        cps = [r["result"]["completions_per_s"] for r in records if r["side"] == side]
        cps = [c for c in cps if c is not None]
        if not cps:
            continue
        est = bootstrap_statistic(np.median, np.array(cps), level=0.95, resamples=2000, seed=0)
        left.bar(i, est.mean, yerr=[[est.mean - est.low], [est.high - est.mean]], capsize=4, color=f"C{i}")
    left.set(xticks=range(len(sides)), xticklabels=sides, ylabel="trained completions / s", title="throughput")
    for i, side in enumerate(sides):
        for j, r in enumerate(r for r in records if r["side"] == side):
            curve = r["result"].get("heldout") or []
            right.plot(
                [p["seconds"] for p in curve],
                [p["accuracy"] for p in curve],
                color=f"C{i}",
                marker=".",
                alpha=0.7,
                label=side if j == 0 else None,
            )
    right.axhline(THRESHOLD, color="grey", ls="--", lw=1)
    right.set(xlabel="training clock (s)", ylabel="held-out final-answer accuracy", title="time to reward")
    right.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4], help="max_off_policy_steps of the async sides")
    p.add_argument("--steps", type=int, default=50, help="steps a run (its budget)")
    p.add_argument("--minutes", type=float, default=25.0, help="wall-clock cap a run (train.max_minutes)")
    p.add_argument("--eval-every", type=int, default=5, help="steps between held-out measurements")
    p.add_argument("--equivalence-steps", type=int, default=5)
    p.add_argument("--sampler-threads", type=int, default=1, help="the async sides' engine process threads")
    p.add_argument("--async-train-threads", type=int, default=1, help="the async sides' trainer threads")
    p.add_argument("--work", type=Path, default=Path("/tmp/async_rl"))
    p.add_argument("--results", type=Path, default=RESULTS / "async_rl.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img_async_rl.png")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 seed, 3 tiny steps; writes under /tmp")
    add_round_arguments(p)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.equivalence_steps = args.seeds[:1], 3, 1, 2
        args.minutes, args.work = 5.0, QUICK_OUT / "work"
        args.results, args.plot = QUICK_OUT / "async_rl.json", QUICK_OUT / "async_rl.png"
    if 1 not in args.ks:
        p.error("--ks must include 1 (the headline is K = 1 over sync)")
    args.ks = sorted(set(args.ks), key=lambda k: (k != 1, k))
    t0 = time.time()
    faults = faults_fields()  # before hours of runs: a missing file fails now
    print("equivalence: K = 0, batching engine in process vs in the engine process", flush=True)
    equiv = equivalence(args)
    print(f"  max |diff| {equiv['max_abs_diff']:.3g} over {equiv['steps']} steps", flush=True)
    records = paired_seeds(lambda side, seed: run_side(side, seed, args), side_names(args.ks), args.seeds)
    extra = {
        **summary_fields(records, args.ks, equiv, faults),
        "command": "python bench/experiments/async_rl.py " + " ".join(sys.argv[1:]),
        "quick": args.quick,
        "config": "examples/grpo_arith.yaml",
        "start": "the default model (the example has no SFT'd start)",
        "budget": {"steps": args.steps, "minutes": args.minutes, "eval_every": args.eval_every},
        "clock": "sum of the Trainer's step_s plus each held-out eval's eval_wait_s; model load, evaluations, checkpoints off",
        "engines": {
            "sync": "batching engine in process (the example's default), train.threads 2",
            "async": (
                f"the same batching engine in an engine process, sampler.threads {args.sampler_threads}, "
                f"train.threads {args.async_train_threads}"
            ),
        },
        "wall_s": time.time() - t0,
    }
    from tempering.models.precision import resolve_precision

    result = write_result(
        args.results,
        benchmark="async_rl",
        host=host(resolve_precision("auto"), threads=2),
        rounds=records,
        candidate=f"async_k{args.ks[0]}",
        baseline="sync",
        metric="completions_per_s",
        max_load=args.max_load,
        extra=extra,
    )
    plot(records, args.ks, args.plot, "smoke run (--quick): not a measurement" if args.quick else "")
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "speedup_completions_per_s",
                    "speedup_ci_low",
                    "time_to_reward_ratio_vs_sync",
                    "sync_equivalence_max_abs_diff",
                    "wall_s",
                )
            },
            indent=1,
        )
    )
    print(f"wrote {args.results} and {args.plot}")


if __name__ == "__main__":
    main()
