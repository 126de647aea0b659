"""Throughput of the verifiers: HumanEval canonical solutions through the code verifier, and the numeric one.

    PYTHONPATH=src .venv/bin/python bench/throughput/verifier.py [--tasks 40] [--numeric 200] [--out bench/results/verifier.json]

The code verifier scores `--tasks` canonical solutions (the first N HumanEval tasks) with a
4-slot sandbox and 4 threads; the report gives verdicts/s and whether all passed. Then
`--numeric` scores of the numeric verifier, serially. Runs against both verifier APIs: the old
`score(task, text)` with a module-global pool, and `score(task, text, ctx)` with a
`VerifierContext` (detected with `inspect`), so one script measures before and after.
The machine's load average is recorded: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks
from tempering.types import Task
from tempering.verifiers import score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

SLOTS = THREADS = 4


def context_api() -> bool:
    """True when `score` takes a verifier context (`score(task, text, ctx)`, the API since `VerifierContext`)."""
    return "ctx" in inspect.signature(score).parameters


def open_scorer():
    """(score one (task, text), close): a 4-slot sandbox under either API."""
    if context_api():
        from tempering.verifiers import VerifierContext

        ctx = VerifierContext(sandbox_size=SLOTS)
        return (lambda task, text: score(task, text, ctx)), ctx.close
    from tempering.sandbox import SandboxPool
    from tempering.verifiers import code

    pool = SandboxPool(size=SLOTS)
    code.use_sandbox_pool(pool)
    return score, pool.close


def bench_code(n: int, scorer) -> dict:
    tasks = humaneval_tasks()[:n]
    jobs = [(t, humaneval_canonical(t.id)) for t in tasks]
    scorer(*jobs[0])  # warm: sandbox self-check, interpreter caches
    t0 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as ex:
        rewards = list(ex.map(lambda job: scorer(*job), jobs))
    wall = time.perf_counter() - t0
    failed = [t.id for t, r in zip(tasks, rewards) if r.value != 1.0]
    return {
        "tasks": n,
        "slots": SLOTS,
        "threads": THREADS,
        "wall_s": round(wall, 3),
        "verdicts_per_s": round(n / wall, 3),
        "all_pass": not failed,
        "failed": failed,
    }


def bench_numeric(n: int, scorer) -> dict:
    tasks = [Task(id=f"n{i}", prompt=f"{i}+{i}?", verifier={"type": "numeric", "answer": str(2 * i)}) for i in range(n)]
    t0 = time.perf_counter()
    values = [scorer(t, f"The answer is {2 * i}.").value for i, t in enumerate(tasks)]
    wall = time.perf_counter() - t0
    return {
        "scores": n,
        "wall_s": round(wall, 4),
        "scores_per_s": round(n / wall, 1),
        "all_correct": all(v == 1.0 for v in values),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=40, help="HumanEval canonical solutions to score")
    ap.add_argument("--numeric", type=int, default=200, help="numeric-verifier scores")
    ap.add_argument("--out", default=str(RESULTS / "verifier.json"))
    args = ap.parse_args()
    load_before = os.getloadavg()
    scorer, close = open_scorer()
    try:
        code_result = bench_code(args.tasks, scorer)
        numeric_result = bench_numeric(args.numeric, scorer)
    finally:
        close()
    result = {
        "api": "context" if context_api() else "global_pool",
        "code": code_result,
        "numeric": numeric_result,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(json.dumps(result, indent=2))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
