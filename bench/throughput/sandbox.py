"""Sandbox overhead vs a bare subprocess, and throughput at 1, 2 and 8 concurrent runs.

    .venv/bin/python bench/throughput/sandbox.py [--runs 60]

Prints a table and writes bench/results/sandbox.json. The program is the same in both
columns: `python3 -c 'print(1)'` (the system interpreter). Run as root with bubblewrap.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tempering.sandbox import SandboxPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

PROGRAM = ["/usr/bin/python3", "-c", "print(1)"]


def bare_once() -> float:
    t = time.perf_counter()
    subprocess.run(PROGRAM, capture_output=True, check=True)
    return time.perf_counter() - t


def sandbox_once(pool: SandboxPool) -> float:
    t = time.perf_counter()
    r = pool.exec(PROGRAM)
    assert r.ok, r
    return time.perf_counter() - t


def throughput(fn, runs: int, concurrency: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(lambda _: fn(), range(runs)))
    return runs / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--out", default=str(RESULTS / "sandbox.json"))
    args = ap.parse_args()
    with SandboxPool(size=8) as pool:
        pool.check()
        for _ in range(5):  # warm caches
            bare_once(), sandbox_once(pool)
        # interleave so that load changes on a shared machine hit both columns alike
        bare, boxed = [], []
        for _ in range(args.runs):
            bare.append(bare_once())
            boxed.append(sandbox_once(pool))
        rates = {"bare": {}, "sandbox": {}}
        for c in (1, 2, 8):
            rates["bare"][c] = throughput(bare_once, args.runs * 2, c)
            rates["sandbox"][c] = throughput(lambda: sandbox_once(pool), args.runs * 2, c)
        health = pool.health()
    med_bare, med_box = statistics.median(bare), statistics.median(boxed)
    result = {
        "program": " ".join(PROGRAM),
        "runs": args.runs,
        "backend": health["backend"],
        "median_bare_ms": round(med_bare * 1e3, 2),
        "median_sandbox_ms": round(med_box * 1e3, 2),
        "median_overhead_ms": round((med_box - med_bare) * 1e3, 2),
        "runs_per_s": {k: {str(c): round(v, 1) for c, v in d.items()} for k, d in rates.items()},
        "targets": {"overhead_ms_max": 10, "runs_per_s_at_8_min": 60},
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "health": health,
    }
    print(f"{'':24}{'bare':>10}{'sandbox':>10}")
    print(f"{'median per run (ms)':24}{result['median_bare_ms']:>10}{result['median_sandbox_ms']:>10}")
    for c in (1, 2, 8):
        print(f"{f'runs/s at {c} concurrent':24}{rates['bare'][c]:>10.1f}{rates['sandbox'][c]:>10.1f}")
    print(
        f"median overhead: {result['median_overhead_ms']} ms (target <= 10); "
        f"sandbox runs/s at 8: {rates['sandbox'][8]:.1f} (target >= 60); load {result['machine']['loadavg_1m_at_end']}"
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
