"""`make demo`'s figure per precision: `examples/demo.yaml` in bf16 and in fp32, seeds interleaved.

    python bench/experiments/demo_precision.py [--seeds 0 1 2] [--out runs/demo-precision]
    python bench/experiments/demo_precision.py --collect     # only re-read finished runs

Each run is `temper run examples/demo.yaml --seed S` in a fresh run root with Tempering's eval
cache emptied (the model's one-time conversion stays cached, as after `make setup`), alone
on the machine and started once the load average is below 0.5 (`quiet`), in the order fp32 s0,
bf16 s0, fp32 s1, ... so drift in the host hits both sides:

  * bf16: the host's own default (`precision: auto` on an AMX / AVX512-BF16 host is bf16);
  * fp32: the same host as an AVX2-only one (`TEMPERING_CPU_FEATURES=avx2`, which also makes
    ATen, inductor and oneDNN emit AVX2 code): `auto` resolves to fp32 there, as on a real
    AVX2 host, and every fallback path runs.

Per precision: final-answer and strict accuracy after the loop (canonical and reworded prompts)
with a 95% interval (items resampled, each item's score averaged over the seeds: the interval
covers which 50 held-out items were drawn; the seed spread is given beside it), the GRPO steps
each run took, and wall time per run. Writes bench/results/demo_precision.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from loop import run_pipeline, stage_seconds  # noqa: E402  (bench/experiments, the script's own folder)

from _shared.paths import RESULTS, ROOT  # noqa: E402
from tempering.models.cpu_features import emulation_env  # noqa: E402
from tempering.models.load import cache_dir  # noqa: E402

PIPELINE = "examples/demo.yaml"
SUITES = {
    "final": "add-final",
    "strict": "add-strict",
    "reworded_final": "add-reworded-final",
    "reworded_strict": "add-reworded-strict",
}
SIDES = {"fp32": {"TEMPERING_CPU_FEATURES": "avx2"}, "bf16": {}}


def run_one(precision: str, seed: int, out: Path) -> dict:
    """One demo pipeline, as a subprocess; its record (read back from the stages)."""
    root = out / f"{precision}-s{seed}"
    env = side_env(precision)
    shutil.rmtree(cache_dir() / "evals", ignore_errors=True)  # the baseline eval runs, as on a first `make demo`
    quiet()
    load_before = [round(x, 2) for x in os.getloadavg()]
    result, wall, returncode = run_pipeline(PIPELINE, seed, str(root), env)
    stages = result["stages"]
    before, after = (_scores(stages[name]["outputs"]["results"]) for name in ("baseline", "after"))
    record = {
        "precision": precision,
        "seed": seed,
        "env": SIDES[precision],
        "exit_code": returncode,
        "wall_s": round(wall, 1),
        "stage_seconds": {name: _rounded(stage_seconds(s.get("run_dir"))) for name, s in stages.items()},
        "grpo_steps": _grpo_steps(stages["grpo"].get("run_dir")),
        "cached_stages": [name for name, s in stages.items() if s["status"] == "cached"],
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "before": {k: statistics.fmean(v.values()) for k, v in before.items()},
        "after": {k: statistics.fmean(v.values()) for k, v in after.items()},
        "after_task_scores": after,
    }
    (out / f"{precision}-s{seed}.json").write_text(json.dumps(record, indent=1))
    return record


def quiet(below: float = 0.5, limit_s: float = 240.0) -> None:
    """Wait (at most `limit_s`) for the 1-minute load average to fall below `below`: a run starts
    on a quiet host, as `make demo` would, and `threads: auto` sees the cores free."""
    deadline = time.time() + limit_s
    while os.getloadavg()[0] >= below and time.time() < deadline:
        time.sleep(5)


def _scores(path: str) -> dict[str, dict[str, float]]:
    """Per suite key: task id -> its score (greedy, one sample) on the primary metric."""
    results = json.loads(Path(path).read_text())
    by_suite = {s["suite"]: s for s in results["suites"]}
    return {
        key: {task: statistics.fmean(v) for task, v in by_suite[suite]["task_scores"].items()}
        for key, suite in SUITES.items()
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _grpo_steps(run_dir: str | None) -> int | None:
    """Optimizer steps the GRPO stage took (its metrics.jsonl's last step)."""
    metrics = Path(run_dir or "/nonexistent") / "metrics.jsonl"
    if not metrics.is_file():
        return None
    steps = [json.loads(line).get("step") for line in metrics.read_text().splitlines() if line.strip()]
    return max((s for s in steps if isinstance(s, int)), default=None)


def side_env(precision: str) -> dict[str, str]:
    """The environment a side's runs get: the host's own, or the AVX2 mask and its ISA variables."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.update(SIDES[precision])
    if "TEMPERING_CPU_FEATURES" in env:
        env.update(emulation_env(env["TEMPERING_CPU_FEATURES"]))
    return env


def auto_resolves_to(precision: str) -> str:
    """What `precision: auto` resolves to under a side's environment (asked in a child process)."""
    code = (
        "from tempering.models.precision import resolve_precision as r, auto_reason as a; print(r('auto') + a('auto'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=side_env(precision), capture_output=True, text=True, check=True
    ).stdout.strip()


OLD_TIME_BOX_S = 210.0
"""The GRPO stage's `max_minutes: 3.5` before the demo was bounded by steps (what fp32 lost)."""


def grpo_timing(out: Path, precision: str, seed: int) -> dict:
    """Seconds per GRPO step of a run, and how many steps the old 3.5-minute box would have let it take."""
    metrics = next((out / f"{precision}-s{seed}").glob("grpo-*/metrics.jsonl"))
    steps = [json.loads(line)["step_s"] for line in metrics.read_text().splitlines() if '"step_s"' in line]
    elapsed, within = 0.0, 0
    for s in steps:
        elapsed += s
        within += elapsed <= OLD_TIME_BOX_S
    return {"step_s_mean": round(statistics.fmean(steps), 2), "steps_within_3.5_min": within}


def summarize(records: list[dict], root: Path) -> dict:
    from tempering.evals.stats import bootstrap_ci, seed_spread

    out: dict = {}
    for precision in SIDES:
        runs = sorted((r for r in records if r["precision"] == precision), key=lambda r: r["seed"])
        if not runs:
            continue
        side: dict = {"seeds": [r["seed"] for r in runs], "auto_resolves_to": auto_resolves_to(precision)}
        for key in SUITES:
            tasks = sorted(runs[0]["after_task_scores"][key])
            per_task = [[r["after_task_scores"][key][t] for r in runs] for t in tasks]
            ci = bootstrap_ci(per_task)
            spread = seed_spread([r["after"][key] for r in runs])
            side[f"{key}_mean"] = ci.mean
            side[key] = {"mean": ci.mean, "low": ci.low, "high": ci.high, "items": ci.n, "seeds": spread.__dict__}
            side[f"{key}_before_mean"] = statistics.fmean(r["before"][key] for r in runs)
        walls = [r["wall_s"] for r in runs]
        side["wall_s_mean"] = statistics.fmean(walls)
        side["wall_s"] = walls
        side["grpo_steps"] = [r["grpo_steps"] for r in runs]
        side["grpo_timing"] = [grpo_timing(root, precision, r["seed"]) for r in runs]
        side["stage_seconds_mean"] = {
            name: round(statistics.fmean(r["stage_seconds"][name] or 0 for r in runs), 1)
            for name in runs[0]["stage_seconds"]
        }
        out[precision] = side
    return out


def precision_gap(records: list[dict]) -> dict:
    """fp32 - bf16 per metric, paired by held-out item (each item averaged over a side's seeds)."""
    from tempering.evals.stats import paired_bootstrap

    sides = {p: [r for r in records if r["precision"] == p] for p in SIDES}
    if not all(sides.values()):
        return {}
    gap = {}
    for key in SUITES:
        tasks = sorted(sides["bf16"][0]["after_task_scores"][key])
        per_side = {p: [[r["after_task_scores"][key][t] for r in runs] for t in tasks] for p, runs in sides.items()}
        c = paired_bootstrap(per_side["bf16"], per_side["fp32"])
        gap[key] = {"delta": c.delta, "low": c.low, "high": c.high, "p_value": c.p_value, "significant": c.significant}
    return gap


def host() -> dict:
    from tempering.models.cpu_features import PATHS, refusal

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.machine(),
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "paths_unmasked": {name: refusal(name) or "on" for name in PATHS},
        "python": platform.python_version(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--precisions", nargs="+", default=list(SIDES), choices=list(SIDES))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "demo-precision")
    p.add_argument("--collect", action="store_true", help="only summarise the runs already in --out")
    p.add_argument("--alongside", default="nothing", help="what else ran on the machine during the runs (recorded)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.collect:
        for seed in args.seeds:
            for precision in args.precisions:
                r = run_one(precision, seed, args.out)
                print(
                    f"{precision} seed {seed}: {r['wall_s']:.0f}s, GRPO {r['grpo_steps']} steps; strict "
                    f"{r['before']['strict']:.2f} -> {r['after']['strict']:.2f}, final "
                    f"{r['before']['final']:.2f} -> {r['after']['final']:.2f}",
                    flush=True,
                )
    records = [json.loads(f.read_text()) for f in sorted(args.out.glob("*-s*.json"))]
    result = {
        "benchmark": "demo_precision",
        "date": time.strftime("%Y-%m-%d"),
        "pipeline": PIPELINE,
        "host": host(),
        "interval": "95% percentile bootstrap over the 50 held-out items, each item's score averaged over the seeds",
        "alongside": args.alongside,
        **summarize(records, args.out),
        "fp32_minus_bf16": precision_gap(records),
        "runs": [{k: v for k, v in r.items() if k != "after_task_scores"} for r in records],
    }
    (RESULTS / "demo_precision.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in SIDES if k in result}, indent=1))


if __name__ == "__main__":
    main()
