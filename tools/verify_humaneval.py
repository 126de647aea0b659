"""All 164 HumanEval canonical solutions through the real `temper verify` command.

Writes each task as JSON and its canonical solution as a file, runs
`temper verify --task T --completion C` as a separate process for each (`--jobs` at a time),
and reads the Reward JSON from its last line. Also scores one wrong solution per task
(the canonical body replaced by `return None`) to show the verifier is not a rubber stamp.

    python tools/verify_humaneval.py [--jobs 2] [--out bench/results/humaneval_canonical.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks

TEMPER = str(Path(sys.executable).parent / "temper")


def verify(task_path: Path, completion_path: Path) -> dict:
    res = subprocess.run(
        [TEMPER, "verify", "--task", str(task_path), "--completion", str(completion_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0:
        return {"value": None, "error": res.stderr.strip()[-300:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="bench/results/humaneval_canonical.json")
    args = p.parse_args()
    tasks = humaneval_tasks()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for i, task in enumerate(tasks):
            tp, cp, wp = Path(tmp, f"{i}.json"), Path(tmp, f"{i}.py"), Path(tmp, f"{i}.wrong.py")
            tp.write_text(task.model_dump_json())
            cp.write_text(humaneval_canonical(task.id))
            wp.write_text("    return None\n")
            jobs.append((task.id, tp, cp, wp))
        with ThreadPoolExecutor(args.jobs) as pool:
            right = list(pool.map(lambda j: verify(j[1], j[2]), jobs))
            wrong = list(pool.map(lambda j: verify(j[1], j[3]), jobs))
    passed = [tid for (tid, *_), r in zip(jobs, right) if r.get("value") == 1.0]
    failed = {tid: r for (tid, *_), r in zip(jobs, right) if r.get("value") != 1.0}
    wrong_full = [tid for (tid, *_), r in zip(jobs, wrong) if r.get("value") == 1.0]
    result = {
        "tasks": len(tasks),
        "canonical_pass": len(passed),
        "canonical_failures": failed,
        "wrong_solution_scored_1": wrong_full,
        "wrong_solution_mean": sum(r.get("value") or 0 for r in wrong) / len(wrong),
        "seconds": time.time() - t0,
        "jobs": args.jobs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        f"canonical: {len(passed)}/{len(tasks)} pass; `return None`: {len(wrong_full)} score 1, "
        f"mean {result['wrong_solution_mean']:.3f}; {result['seconds']:.0f}s"
    )
    raise SystemExit(0 if len(passed) == len(tasks) else 1)


if __name__ == "__main__":
    main()
