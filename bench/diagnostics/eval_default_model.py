"""Measure the default model on the built-in suites: HumanEval pass@1/pass@10, the arithmetic
suites and the two reasoning-gym tasks, with seed spread, stability and paraphrase spread.

    python bench/diagnostics/eval_default_model.py --out runs/eval-default            # the measurement
    python bench/diagnostics/eval_default_model.py --out /tmp/eval-quick --quick      # a few tasks, 2 samples

Settings (each suite's own YAML unless overridden here):
  * humaneval: a stride subset of the 164 problems (every `--humaneval-every`-th, default 4:
    HumanEval/0, /4, ... = 41 problems), because on this 2-core CPU the full set at 10
    samples x up to 384 tokens would take over an hour (measured: ~45 generated tokens/s at
    small batches on one contended core). 2 seeds x 5 samples = 10 samples per problem:
    pass@1 and pass@10 from all 10 (unbiased estimator), stability over the 2 seeds. The
    canonical template only: paraphrase spread is measured on the four cheaper suites.
  * arithmetic, arithmetic-add, rg-chain-sum, rg-spell-backward: every task, `--seeds` seeds
    (default 3) x the suite's 4 samples, plus each paraphrase template once.
Everything lands in OUT/results.json and OUT/report.html; OUT/report.png is the headless
Chromium screenshot (tools/screenshot_report.py) and OUT/timings.json the wall time per suite.
Results are cached (~/.cache/tempering/evals), so an interrupted run resumes per suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import ROOT  # noqa: E402

MODEL = "smollm2-135m-instruct"
CHEAP = ["arithmetic", "arithmetic-add", "rg-chain-sum", "rg-spell-backward"]


def humaneval_subset(every: int, limit: int | None, out: Path):
    """The humaneval suite over every `every`-th problem (a task file in `out`), 2 seeds x 5 samples."""
    from tempering.evals.suite import SuiteTasks, load_suite

    full = load_suite("humaneval")
    tasks = full.task_list[::every][:limit]
    path = out / f"humaneval-every{every}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    return full.model_copy(
        update={
            "name": f"humaneval-{len(tasks)}of164",
            "tasks": [SuiteTasks(source=str(path), n=len(tasks))],
            "description": f"HumanEval problems 0, {every}, {2 * every}, ... ({len(tasks)} of 164)",
            "seeds": 2,
            "sampling": full.sampling.model_copy(update={"n": 5}),
            "templates": full.templates[:1],
        }
    )


def plan(args) -> list:
    from tempering.evals.suite import load_suite

    if args.quick:  # a few tasks, 2 samples: checks the wiring, measures nothing
        suites = [humaneval_subset(args.humaneval_every, 2, args.out)] + [load_suite(n) for n in CHEAP]
        return [
            s.with_overrides(limit=3, samples=2, seeds=2).model_copy(
                update={"metrics": [m for m in s.metrics if m in ("accuracy", "mean_reward", "pass@1", "pass@2")]}
            )
            for s in suites
        ]
    seeds_for = dict(item.split("=") for item in args.seeds_for)
    suites = [humaneval_subset(args.humaneval_every, None, args.out)] + [
        load_suite(n).with_overrides(seeds=int(seeds_for.get(n, args.seeds))) for n in CHEAP
    ]
    return [s for s in suites if not args.only or s.name in args.only]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--humaneval-every", type=int, default=4)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", nargs="*", default=[], help="evaluate only these suites (cached ones are reused)")
    p.add_argument("--seeds-for", nargs="*", default=[], metavar="SUITE=K", help="per-suite seed counts")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from rich.console import Console

    from tempering.config import EngineSettings
    from tempering.evals.cache import default_cache_dir, model_dir_hash
    from tempering.evals.report import print_table, render_report
    from tempering.evals.results import EvalResults
    from tempering.evals.runner import run_suite
    from tempering.rollout.select import load_engine

    err = Console(stderr=True)
    suites = plan(args)
    engine = load_engine(EngineSettings.model_validate({"kind": "hf"}), MODEL, "auto")  # the product's engine builder
    model_hash = model_dir_hash(MODEL)
    results, timings = [], {}
    for suite in suites:
        suite.check_samples()
        t0 = time.perf_counter()
        results.append(
            run_suite(
                suite,
                engine,
                model_id=MODEL,
                model_hash=model_hash,
                cache_dir=default_cache_dir(),
                log=lambda line: err.print(f"[dim]{line}[/dim]"),
            )
        )
        timings[suite.name] = time.perf_counter() - t0
        err.print(f"{suite.name}: {timings[suite.name]:.0f}s")
    evaluated = EvalResults(model=MODEL, suites=results)
    evaluated.save(args.out / "results.json")
    report = render_report(evaluated, args.out)
    (args.out / "timings.json").write_text(
        json.dumps(
            {
                "seconds": timings,
                "torch_threads": torch.get_num_threads(),
                "precision": engine.precision,
                "quick": args.quick,
                "humaneval_every": args.humaneval_every,
            },
            indent=1,
        )
        + "\n"
    )
    print_table(evaluated)
    shot = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "screenshot_report.py"),
            str(report),
            str(args.out / "report.png"),
            "--height",
            "4200",
        ],
        capture_output=True,
        text=True,
    )
    print(shot.stdout.strip() or shot.stderr.strip())


if __name__ == "__main__":
    main()
