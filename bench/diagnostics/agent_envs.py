"""The harness's own check on the environment suites: scripted policies over every task.

For each suite (default `repo` and `workspace`): the oracle (the task's scripted expert), a
no-op policy and the seeded random policy (`--seeds` seeds, one episode per task and seed)
play every task in the bwrap sandbox. Reported per suite, split, tier and family: completion
rate (with a task-bootstrap 95% CI for the random policy, pooled over seeds), steps, invalid
calls, unsafe calls, sandbox seconds per episode, and the wall time of each sweep.

    python bench/diagnostics/agent_envs.py [--suites repo workspace] [--seeds 0 1 2 3 4]

Writes bench/results/agent_repo_env.json. The sweep's wall time is load-bound (2 shared cores);
the load average before and after is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402


def ci95(values: list[float]) -> list[float]:
    """Percentile bootstrap over the values (one per task) of their mean (`tempering.evals.stats`)."""
    from tempering.evals.stats import bootstrap_ci

    e = bootstrap_ci(values)
    return [round(e.low, 4), round(e.high, 4)]


def breakdown(results) -> dict:
    """Completion per split, tier and family."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        for key in (r.task.split, f"tier {r.task.tier}", f"family {r.task.family}"):
            groups[key].append(r.stats.success)
    return {k: round(sum(v) / len(v), 4) for k, v in sorted(groups.items())}


def sweep(pool, suite: str, seeds: list[int]) -> dict:
    from tempering.agents.episode import run_episodes, summarise
    from tempering.agents.policies import POLICIES
    from tempering.agents.tasks import builtin_tasks

    tasks = builtin_tasks(suite)
    out: dict = {"tasks": len(tasks), "families": sorted({t.family or "" for t in tasks})}
    for name in ("oracle", "noop", "random"):
        t0 = time.perf_counter()
        per_seed = seeds if name == "random" else [0]
        results = []
        for seed in per_seed:
            make = POLICIES[name]
            results += run_episodes(pool, lambda i, s=seed, m=make: m(s * 100_000 + i), tasks)
        summary = summarise([r.stats for r in results])
        by_task: dict[str, list[float]] = defaultdict(list)
        for r in results:
            by_task[r.task.id].append(float(r.stats.success))
        row = {
            "episodes": len(results),
            "completion_rate": round(summary["completion_rate"], 4),
            "completion_ci95": ci95([sum(v) / len(v) for v in by_task.values()]),
            "steps": round(summary["steps"], 2),
            "invalid_calls": round(summary["invalid_calls"], 3),
            "unsafe_actions": round(summary["unsafe_actions"], 3),
            "env_errors": summary["env_errors"],
            "sandbox_s_per_episode": round(summary["sandbox_s"], 3),
            "wall_s": round(time.perf_counter() - t0, 1),
            "by": breakdown(results),
        }
        out[name] = row
        print(f"{suite} {name}: completion {row['completion_rate']} over {row['episodes']} episodes", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["repo", "workspace"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default=str(RESULTS / "agent_repo_env.json"))
    args = parser.parse_args()

    from tempering.sandbox import Limits, SandboxPool
    from tempering.sandbox.base import MiB

    limits = Limits(wall_s=5, cpu_s=3, memory_bytes=128 * MiB, scratch_bytes=8 * MiB, output_bytes=64 * 1024)
    load_before = os.getloadavg()
    with SandboxPool(backend="bwrap", size=4, limits=limits) as pool:
        pool.check()
        suites = {suite: sweep(pool, suite, args.seeds) for suite in args.suites}
    result = {
        "what": "scripted oracle / no-op / seeded random policies over every task of each suite (bwrap sandbox)",
        "suites": suites,
        "random_seeds": args.seeds,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "note": "other helpers' work ran on the same 2 cores; wall times are load-bound",
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
