"""The capability target through the loop (docs/pipeline.md): held-out 2-digit addition, final-answer
and strict accuracy after `examples/arith_loop.yaml`, seeds one after another.

    python bench/experiments/loop.py [--seeds 0 1 2] [--pipeline examples/arith_loop.yaml] [--out runs/arith-loop]

For each seed: `temper run PIPELINE --seed S` (a subprocess, alone on the machine: run nothing
else), then the baseline and final eval stages' results are read back:

  * final-answer accuracy (`add-final`: the last number in the reply is right) and strict
    accuracy (`add-strict`: the reply is the number alone), greedy, 100 held-out additions,
    canonical prompt; each with its bootstrap CI and the paired CI of the gain;
  * the same on reworded prompts never trained on (`add-reworded-*`), and the ratio of the
    reworded gain to the in-template gain (the target: at least 0.5 for both metrics);
  * the other built-in suites and the gate's verdict (no significant drop);
  * wall-clock per seed: the run itself, and the sum of its stages' own durations including
    any stage served from the cache (the baseline eval is shared by the seeds).

Finished stages are cached by content, so re-running this after a crash continues where it
stopped, and running it on finished seeds only collects. Writes bench/results/loop.json.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

TARGET = {
    "add-final": "final_answer_accuracy",
    "add-strict": "strict_accuracy",
    "add-reworded-final": "reworded_final_answer_accuracy",
    "add-reworded-strict": "reworded_strict_accuracy",
}


def load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def stage_seconds(run_dir: str | None) -> float | None:
    if not run_dir:
        return None
    rec = Path(run_dir) / "pipeline-stage.json"
    if not rec.is_file():
        return None
    r = json.loads(rec.read_text())
    if r.get("started_at") and r.get("finished_at"):
        return r["finished_at"] - r["started_at"]
    return None


def run_pipeline(pipeline: str, seed: int, out: str, env: dict[str, str]) -> tuple[dict, float, int]:
    """`temper run PIPELINE --seed S --out OUT` as a subprocess: (its result line, wall seconds, exit code)."""
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "tempering.cli", "run", pipeline, "--seed", str(seed), "--out", out],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    wall = time.time() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(
            f"{pipeline} seed {seed}: the pipeline printed no result (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1]), wall, proc.returncode


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    load_before = load_avg()
    out, wall, returncode = run_pipeline(args.pipeline, seed, args.out, env)
    stages = out["stages"]
    base, after = load(stages["baseline"]["outputs"]["results"]), load(stages["after"]["outputs"]["results"])
    gate = load(stages["gate"]["outputs"]["verdict"]) if stages["gate"].get("outputs") else None
    cached = [name for name, s in stages.items() if s["status"] == "cached"]
    seconds = {name: stage_seconds(s.get("run_dir")) for name, s in stages.items()}
    return {
        "seed": seed,
        "status": out["status"],
        "exit_code": returncode,
        "wall_s": round(wall, 1),
        "stage_seconds": {k: round(v, 1) for k, v in seconds.items() if v is not None},
        "pipeline_seconds_incl_cached": round(sum(v for v in seconds.values() if v), 1),
        "first_run_wall_s": round(wall, 1) if not cached or cached == ["baseline"] else None,
        "cached_stages": cached,
        "load_before": load_before,
        "load_after": load_avg(),
        "before": _means(base),
        "after": _means(after),
        "comparison": _paired(base, after),
        "gate": {
            "passed": gate["passed"],
            "rules": [{"rule": r["rule"], "passed": r["passed"], "detail": r.get("detail")} for r in gate["rules"]],
        }
        if gate
        else None,
        "release": stages.get("release", {}).get("status"),
        "run_dirs": {k: s.get("run_dir") for k, s in stages.items()},
    }


def _means(results: dict) -> dict[str, float]:
    out = {}
    for s in results["suites"]:
        metric = "accuracy" if "accuracy" in s["metrics"] else next(iter(s["metrics"]))
        out[s["suite"]] = s["metrics"][metric]["mean"]
    return out


def _paired(base: dict, after: dict) -> dict[str, dict]:
    from tempering.evals.results import EvalResults, compare

    b, a = EvalResults.model_validate(base), EvalResults.model_validate(after)
    return {
        c.suite: {
            "delta": c.comparison.delta,
            "low": c.comparison.low,
            "high": c.comparison.high,
            "significant": c.comparison.significant,
        }
        for c in compare(b, a)
    }


def summarize(runs: list[dict]) -> dict:
    metrics = {}
    for suite, key in TARGET.items():
        before = [r["before"][suite] for r in runs]
        after = [r["after"][suite] for r in runs]
        metrics[key] = {
            "before": _stat(before),
            "after": _stat(after),
            "gain": _stat([a - b for a, b in zip(after, before)]),
        }
    ratio = {}
    for kind, (tmpl, rew) in {
        "final_answer": ("add-final", "add-reworded-final"),
        "strict": ("add-strict", "add-reworded-strict"),
    }.items():
        gains = [(r["after"][rew] - r["before"][rew], r["after"][tmpl] - r["before"][tmpl]) for r in runs]
        ratio[kind] = _stat([g_rew / g_tmpl if g_tmpl > 0 else float("nan") for g_rew, g_tmpl in gains])
    return {
        "final_answer_accuracy_mean": metrics["final_answer_accuracy"]["after"]["mean"],
        "strict_accuracy_mean": metrics["strict_accuracy"]["after"]["mean"],
        "reworded_final_answer_accuracy_mean": metrics["reworded_final_answer_accuracy"]["after"]["mean"],
        "reworded_strict_accuracy_mean": metrics["reworded_strict_accuracy"]["after"]["mean"],
        "metrics": metrics,
        "reworded_gain_over_in_template_gain": ratio,
        "seconds_per_seed": _stat([r.get("first_run_wall_s") or r["pipeline_seconds_incl_cached"] for r in runs]),
        "gate_passed": [r["gate"]["passed"] if r["gate"] else None for r in runs],
    }


def _stat(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--pipeline", default="examples/arith_loop.yaml")
    p.add_argument("--out", default="runs/arith-loop")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the runs of other seeds already in bench/results/loop.json (to run seeds one at a time)",
    )
    args = p.parse_args()
    runs = []
    kept = []
    if args.keep and (RESULTS / "loop.json").is_file():
        kept = [r for r in load(str(RESULTS / "loop.json"))["runs"] if r["seed"] not in args.seeds]
    for seed in args.seeds:
        r = run_seed(args, seed)
        runs.append(r)
        print(
            f"seed {seed}: {r['status']} in {r['wall_s']:.0f}s; final-answer {r['before']['add-final']:.2f} -> "
            f"{r['after']['add-final']:.2f}, strict {r['before']['add-strict']:.2f} -> {r['after']['add-strict']:.2f}, "
            f"reworded {r['before']['add-reworded-final']:.2f}/{r['before']['add-reworded-strict']:.2f} -> "
            f"{r['after']['add-reworded-final']:.2f}/{r['after']['add-reworded-strict']:.2f}",
            flush=True,
        )
    from tempering.models.precision import resolve_precision

    runs = sorted(kept + runs, key=lambda r: r["seed"])
    doc = {
        "benchmark": "loop",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pipeline": args.pipeline,
        "seeds": [r["seed"] for r in runs],
        "precision": resolve_precision("auto"),
        "targets": {
            "final_answer_accuracy": 0.85,
            "strict_accuracy": 0.80,
            "minutes_per_seed": 30,
            "reworded_gain_ratio": 0.5,
        },
        **summarize(runs),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "loop.json").write_text(json.dumps(doc, indent=1))
    print(
        json.dumps(
            {
                k: doc[k]
                for k in (
                    "final_answer_accuracy_mean",
                    "strict_accuracy_mean",
                    "reworded_final_answer_accuracy_mean",
                    "reworded_strict_accuracy_mean",
                    "reworded_gain_over_in_template_gain",
                    "seconds_per_seed",
                )
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
