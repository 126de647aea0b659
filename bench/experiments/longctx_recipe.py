"""The long-context recipe (`examples/longctx.yaml`) over seeds: accuracy at 4k before and after,
paired by held-out task, and the short suites the gate protects.

Each seed is one `temper run examples/longctx.yaml --seed S` (through `pipeline.runner`): the
baseline evals pin `first_seed: 0`, so they run once and are cached for the other seeds; the
seed changes the training haystacks, the mix and the SFT. Units of the paired bootstrap are
(seed, held-out task) at 4,096 tokens: the after stage's tasks (a subset of the baseline's when it
sets a `limit`), paired with the same task's baseline score.

    python bench/experiments/longctx_recipe.py [--seeds 0 1 2] [--after-8k 3]

Merges `recipe`, `gain_4k_mean`, `gain_4k_ci_low` (and the 8k column when `--after-8k` > 0)
into bench/results/longctx.json, leaving the baseline and extrapolation parts as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LONGCTX_STAGES, SHORT_STAGES = ("before", "after"), ("short_before", "short_after")


def task_scores(results_path: str, metric: str = "accuracy") -> dict[str, dict[str, float]]:
    """suite -> task id -> mean score of `metric` in one results.json."""
    from tempering.evals.results import EvalResults

    out = {}
    for suite in EvalResults.load(results_path).suites:
        out[suite.suite] = {t: sum(v) / len(v) for t, v in suite.scores_of(metric).items() if v}
    return out


def compare(units: list[tuple[float, float]]) -> dict:
    """Paired bootstrap over (before, after) units: after - before, with a 95% interval."""
    from tempering.evals.stats import paired_bootstrap

    c = paired_bootstrap([[a] for a, _ in units], [[b] for _, b in units], resamples=4000)
    before, after = (sum(x) / len(units) for x in zip(*units))
    return {"before": before, "after": after, "delta": c.delta, "ci_low": c.low, "ci_high": c.high} | {
        "p_value": c.p_value,
        "units": c.n,
    }


def run_seed(path: Path, seed: int) -> dict:
    """One pipeline run; the stages' outcomes by name and the wall time of the ones that ran."""
    from tempering.pipeline.plan import load_plan
    from tempering.pipeline.runner import run_pipeline

    started: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def events(stage: str, status: str, info: dict) -> None:
        if status == "running":
            started[stage] = time.perf_counter()
        elif status in ("done", "rejected", "failed") and stage in started:
            seconds[stage] = time.perf_counter() - started[stage]
        if status in ("running", "done", "cached", "failed", "rejected"):
            print(f"seed {seed}: {stage} {status} {info.get('error', '')}", flush=True)

    t0 = time.perf_counter()
    result = run_pipeline(load_plan(path, seed), events=events)
    stages = {o.name: o for o in result.stages}
    failed = [f"{o.name}: {o.error}" for o in result.stages if o.status == "failed"]
    if failed:
        raise SystemExit(f"seed {seed}: {failed[0]}")
    return {"status": result.status, "stages": stages, "seconds": seconds, "wall_s": time.perf_counter() - t0}


def eval_8k(final: str, n: int, kinds: list[str], length: int) -> dict[str, dict[str, float]]:
    """`n` held-out tasks per kind at `length` tokens on one model (as the baseline bench runs them)."""
    from longctx import cell_suite  # bench/experiments/longctx.py

    from tempering.config import EngineSettings
    from tempering.evals.runner import run_suite
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.select import build_engine

    tokenizer, model = load_tokenizer(final), load_model(final).eval()
    engine = build_engine(EngineSettings(kind="hf"), model, tokenizer, "auto")
    out = {}
    for kind in kinds:
        scores = run_suite(cell_suite(kind, length, n, "smollm2-135m-instruct"), engine, seeds=1).scores_of("accuracy")
        out[kind] = {t: sum(v) / len(v) for t, v in scores.items()}
    return out


def at_8k(finals: dict[int, str], kinds: list[str], args: argparse.Namespace) -> dict:
    """The base model and each seed's adapter on the same held-out tasks at `--len-8k` tokens
    (8,192 with the chat template is past the model's window: the default leaves room), paired."""
    import torch

    torch.set_num_threads(args.threads_8k)
    t0 = time.perf_counter()
    base = eval_8k("smollm2-135m-instruct", args.after_8k, kinds, args.len_8k)
    units: list[tuple[float, float]] = []
    per_kind: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for seed, final in finals.items():
        after = eval_8k(final, args.after_8k, kinds, args.len_8k)
        for k in kinds:
            pairs = [(base[k][t], v) for t, v in sorted(after[k].items())]
            units += pairs
            per_kind[k] += pairs
            print(
                f"8k seed {seed} {k}: {sum(b for _, b in pairs)}/{len(pairs)} (base {sum(a for a, _ in pairs)})",
                flush=True,
            )
    return compare(units) | {
        "length": args.len_8k,
        "kinds": kinds,
        "tasks_per_kind_per_seed": args.after_8k,
        "by_kind": {k: compare(u) for k, u in per_kind.items()},
        "seconds": time.perf_counter() - t0,
        "threads": args.threads_8k,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--pipeline", type=Path, default=ROOT / "examples" / "longctx.yaml")
    p.add_argument(
        "--after-8k", type=int, default=0, help="held-out tasks per kind near 8k, base model and each adapter"
    )
    p.add_argument(
        "--len-8k", type=int, default=8100, help="haystack tokens of those tasks (the prompt must fit 8,192)"
    )
    p.add_argument("--threads-8k", type=int, default=2)
    p.add_argument(
        "--only-8k", action="store_true", help="add at_8k to --out's recipe from its seeds' adapters; run nothing else"
    )
    p.add_argument("--out", type=Path, default=RESULTS / "longctx.json")
    args = p.parse_args()
    if args.only_8k:
        done = json.loads(args.out.read_text())
        recipe = done["recipe"]
        finals = {int(s): v["sft_final"] for s, v in recipe["per_seed"].items()}
        recipe["at_8k"] = at_8k(finals, list(recipe["by_kind_4k"]), args)
        args.out.write_text(json.dumps(done, indent=1))
        print(json.dumps(recipe["at_8k"], indent=1))
        return
    args.pipeline = args.pipeline.resolve()  # recorded relative to the repository
    sys.path.insert(0, str(Path(__file__).parent))

    import torch

    load_before, t0 = os.getloadavg(), time.perf_counter()
    runs = {seed: run_seed(args.pipeline, seed) for seed in args.seeds}
    long_units: list[tuple[float, float]] = []
    by_kind: dict[str, dict] = {}
    short_units: dict[str, list[tuple[float, float]]] = {}
    per_seed = {}
    for seed, run in runs.items():
        st = run["stages"]
        before, after = (task_scores(st[name].outputs["results"]) for name in LONGCTX_STAGES)
        short_before, short_after = (task_scores(st[name].outputs["results"]) for name in SHORT_STAGES)
        for suite, tasks in after.items():  # the after cells may be a subset of the baseline's (a `limit`)
            kind = suite.removeprefix("longctx-").removesuffix("-4k")
            units = [(before[suite][t], tasks[t]) for t in sorted(tasks)]
            long_units += units
            by_kind.setdefault(kind, {"units": []})["units"] += units
            by_kind[kind][f"seed{seed}"] = [sum(x) / len(units) for x in zip(*units)]
        for suite, tasks in short_before.items():
            short_units.setdefault(suite, []).extend((tasks[t], short_after[suite][t]) for t in sorted(tasks))
        gate = st.get("gate")
        per_seed[str(seed)] = {
            "status": run["status"],
            "gate": gate.summary.get("verdict") if gate else None,
            "gate_failed_rules": gate.summary.get("failed_rules", []) if gate else [],
            "stage_seconds": run["seconds"],
            "wall_s": run["wall_s"],
            "sft_final": st["sft"].outputs["final"],
            "sft_loss_first_last": [
                st["sft"].summary.get("train_loss_first"),
                st["sft"].summary.get("train_loss_last"),
            ],
        }
    gain = compare(long_units)
    result = {
        "pipeline": str(args.pipeline.relative_to(ROOT)),
        "seeds": args.seeds,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before, os.getloadavg()],
        "wall_s": time.perf_counter() - t0,
        "at_4k": gain,
        "by_kind_4k": {
            kind: {"before_after_per_seed": {k: v for k, v in d.items() if k != "units"}} | compare(d["units"])
            for kind, d in by_kind.items()
        },
        "short_suites": {suite: compare(units) for suite, units in short_units.items()},
        "per_seed": per_seed,
        "command": "python bench/experiments/longctx_recipe.py " + " ".join(sys.argv[1:]),
    }
    if args.after_8k:
        result["at_8k"] = at_8k({s: per_seed[str(s)]["sft_final"] for s in args.seeds}, list(by_kind), args)
    print(json.dumps({k: result[k] for k in ("at_4k", "short_suites")}, indent=1))
    merged = json.loads(args.out.read_text()) if args.out.exists() else {}
    merged |= {"recipe": result, "gain_4k_mean": gain["delta"], "gain_4k_ci_low": gain["ci_low"]}
    args.out.write_text(json.dumps(merged, indent=1))


if __name__ == "__main__":
    main()
