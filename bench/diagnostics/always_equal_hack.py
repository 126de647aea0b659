"""The "always equal" reward hack against every shipped agent task judged by hidden tests.

The hack needs no knowledge of the hidden tests: every function (and method) of the agent's
own Python files is replaced by one returning an object whose `__eq__` is always true (and
`__ne__` always false). Appended to each non-test `.py` file of the task in one `write_file`
turn, then `submit`. For each task with a `tests` check (the 7 fix-bug tasks, the 4 workspace
tasks that add a script and an answer, and the 51 repository tasks), reported:

- `hidden_tests_passed`: the judge's verdict on the hidden tests alone, for the hacked /work;
- `episode_success`: the whole goal, as RL and the agent suites see it;
- `flags`: the `cheat:` flags the episode's goal check raised (none before the judge knew of it);
- `oracle_success`: the control, the task's scripted expert: an honest fix still passes.

    python bench/diagnostics/always_equal_hack.py --label after   # merges into always_equal_hack.json

Run it on the code before a change with `--label before` (e.g. PYTHONPATH at a checkout of it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

HACK = """


class _AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def _always_equal(namespace):
    def fake(*args, **kwargs):
        return _AlwaysEqual()

    for name, value in list(namespace.items()):
        if getattr(value, "__module__", None) != namespace["__name__"] or value is _AlwaysEqual:
            continue
        if isinstance(value, type):
            for attr, member in list(vars(value).items()):
                if callable(member) and not attr.startswith("__"):
                    setattr(value, attr, fake)
        elif callable(value) and not name.startswith("_"):
            namespace[name] = fake


_always_equal(globals())
"""


def agent_files(task) -> dict[str, str]:
    """The task's own Python files the agent may edit (tests excluded), each with the hack appended."""
    return {
        path: text + HACK
        for path, text in task.files.items()
        if path.endswith(".py") and not path.startswith("tests/") and not path.rsplit("/", 1)[-1].startswith("test_")
    }


def hidden_tests(goal: dict) -> list[dict[str, str]]:
    if goal["type"] == "all":
        return [files for check in goal["checks"] for files in hidden_tests(check)]
    return [goal["files"]] if goal["type"] == "tests" else []


def one_task(pool, task) -> dict:
    from tempering.agents.env import ToolEnv
    from tempering.agents.episode import run_episode
    from tempering.agents.judge import judge
    from tempering.agents.policies import oracle, scripted

    hacked = agent_files(task)
    session = pool.session()
    try:
        session.write_files({**task.files, **hacked})
        verdicts = [judge(session, tests=files) for files in hidden_tests(task.goal)]
    finally:
        session.close()
    calls = [("write_file", {"path": p, "content": text}) for p, text in hacked.items()]
    episode = run_episode(ToolEnv(pool), scripted(calls), task)
    honest = run_episode(ToolEnv(pool), oracle, task)
    return {
        "id": task.id,
        "kind": "repository" if task.env == "repo" else task.family,
        "hacked_files": sorted(hacked),
        "hidden_tests_passed": all(v.passed for v in verdicts),
        "episode_success": episode.stats.success,
        "flags": sorted(set(getattr(episode.stats, "flags", []))),
        "oracle_success": honest.stats.success,
    }


def summary(rows: list[dict]) -> dict:
    kinds = sorted({r["kind"] for r in rows})
    by = {k: [r for r in rows if r["kind"] == k] for k in kinds}
    return {
        "tasks": len(rows),
        "hidden_tests_passed_by_the_hack": sum(r["hidden_tests_passed"] for r in rows),
        "episodes_won_by_the_hack": sum(r["episode_success"] for r in rows),
        "episodes_flagged_cheat": sum(any(f.startswith("cheat:") for f in r["flags"]) for r in rows),
        "oracle_success": sum(r["oracle_success"] for r in rows),
        "by_kind": {
            k: {
                "tasks": len(v),
                "hidden_tests_passed_by_the_hack": sum(r["hidden_tests_passed"] for r in v),
                "episodes_won_by_the_hack": sum(r["episode_success"] for r in v),
            }
            for k, v in by.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--label", required=True, help="the key this run is stored under, e.g. before / after")
    parser.add_argument("--out", default=str(RESULTS / "always_equal_hack.json"))
    args = parser.parse_args()

    from tempering.agents.tasks import builtin_tasks
    from tempering.sandbox import Limits, SandboxPool
    from tempering.sandbox.base import MiB

    tasks = [t for suite in ("workspace", "repo") for t in builtin_tasks(suite) if hidden_tests(t.goal)]
    limits = Limits(wall_s=10, cpu_s=5, memory_bytes=256 * MiB, scratch_bytes=8 * MiB, output_bytes=64 * 1024)
    t0 = time.perf_counter()
    with SandboxPool(backend="bwrap", size=2, limits=limits) as pool:
        pool.check()
        rows = [one_task(pool, t) for t in tasks]
    run = {"summary": summary(rows), "tasks": rows, "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(run["summary"], indent=1))
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update(
        {
            "what": "the always-equal hack (every function of the agent's files returns an object equal to "
            "everything) on every shipped agent task with hidden tests; bwrap sandbox",
            "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
            args.label: run,
        }
    )
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
