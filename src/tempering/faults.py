"""Fault injection for the fault battery (bench/diagnostics/fault_battery.py): hang, kill or slow a worker.

    TEMPERING_FAULTS=engine:hang:3 TEMPERING_FAULTS_DIR=/tmp/f temper grpo cfg.yaml

makes the 3rd call of the `engine` fault point (counted over every process of the run, through
a counter file in `TEMPERING_FAULTS_DIR`) hang. Fault points sit in the real worker code, where
each worker takes one unit of work:

| point | where | one call is |
|---|---|---|
| `engine` | `scale/engines.py: EngineActor.generate` (a Ray actor process) | one replica's slice of a batch |
| `engine_process` | the same `EngineActor.generate`, in `scale/process_engine.py`'s local process | one call's prompts |
| `ray_reward` | `scale/reward_workers.py: RewardActor.score` (a Ray actor process) | one completion |
| `reward_thread` | `rollout/rollout.py: ThreadRewardWorkers` (a thread of the trainer) | one completion |
| `sandbox` | `sandbox/launch.py`, after the sandboxed process started | one sandboxed run |
| `collective` | `train/distributed.py`, each collective of a torchrun rank | one collective of one rank |
| `tinker_worker` | `serve/tinker_sched.py: Scheduler._step` (the Tinker server's worker thread) | one step of a call |

Kinds: `hang` (the call never returns: a sleep that never ends; a sandboxed process is
SIGSTOPped), `kill` (SIGKILL of the worker's process: the actor's, or the sandboxed program's;
refused for `reward_thread` and `tinker_worker`, threads of the trainer's or the server's process) and `slow` (the call first sleeps
`SLOW_S` seconds). Several faults are comma-separated.

Only the environment of the run's own processes turns faults on: no config key, task row or
model output reaches this module, and the sandboxed program's environment is the sandbox's own
(`sandbox/pool.py: SANDBOX_ENV`), so untrusted input cannot set or see it. Without
`TEMPERING_FAULTS` a fault point costs two dictionary lookups; with only
`TEMPERING_FAULTS_DIR` set, calls are counted and nothing fires.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

ENV, DIR_ENV = "TEMPERING_FAULTS", "TEMPERING_FAULTS_DIR"
POINTS = ("engine", "engine_process", "ray_reward", "reward_thread", "sandbox", "tinker_worker", "collective")
KINDS = ("hang", "kill", "slow")
THREADS = ("reward_thread", "tinker_worker")
"""Points in a thread of the run's (or server's) own process: `kill` would kill that process."""
SLOW_S = 2.0
"""What a `slow` fault adds to one call (well under every default deadline)."""


def parse(spec: str) -> dict[str, tuple[str, int]]:
    """`point:kind:when[,...]` -> {point: (kind, when)}.

    Raises:
        ValueError: an unknown point or kind, a `when` below 1, or `kill` of a thread's point.
    """
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in POINTS or parts[1] not in KINDS or not parts[2].isdigit():
            raise ValueError(f"{ENV}: {item!r} is not point:kind:when (points {POINTS}, kinds {KINDS})")
        if int(parts[2]) < 1:
            raise ValueError(f"{ENV}: {item!r}: `when` counts calls from 1")
        if parts[1] == "kill" and parts[0] in THREADS:
            raise ValueError(f"{ENV}: {parts[0]} is a thread of the run's own process; kill the process to test that")
        out[parts[0]] = (parts[1], int(parts[2]))
    return out


def due(point: str) -> str | None:
    """Count one call of `point`; the fault's kind when this call is the one it names."""
    spec, folder = os.environ.get(ENV), os.environ.get(DIR_ENV)
    if not folder:
        if spec:
            raise RuntimeError(f"{ENV} is set without {DIR_ENV} (the folder of the cross-process call counters)")
        return None
    n = _count(Path(folder) / f"{point}.count")  # counted even with no fault: the battery's unfaulted run
    fault = parse(spec or "").get(point)
    return fault[0] if fault is not None and n == fault[1] else None


def point(name: str, pid: int | None = None) -> None:
    """A fault point: act out the fault due at this call of `name`, if any.

    `pid` is the process a `kill` (or, for a sandboxed process, a `hang`) targets; None: this one."""
    kind = due(name)
    if kind is None:
        return
    _mark(name, kind)
    if kind == "slow":
        time.sleep(SLOW_S)
    elif kind == "kill":
        os.kill(pid or os.getpid(), signal.SIGKILL)
        if pid is None:  # this process: the signal lands before the sleep ends; never return as if unharmed
            time.sleep(60)
    elif pid is not None:
        os.kill(pid, signal.SIGSTOP)  # a stopped process never finishes: its watcher's deadline must act
    else:
        while True:  # a hang: this call never returns
            time.sleep(3600)


def _count(path: Path) -> int:
    """Add one to the counter in `path` (under an flock, so processes never share a number)."""
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read() or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
        return n


def _mark(name: str, kind: str) -> None:
    """Record when the fault fired (`<point>.fired`: kind and time), for the battery's time to detect."""
    folder = Path(os.environ[DIR_ENV])
    (folder / f"{name}.fired").write_text(f"{kind} {time.time():.3f}\n")


def fired(folder: str | Path, name: str) -> float | None:
    """When the fault at `name` fired (epoch seconds), or None if it did not."""
    path = Path(folder) / f"{name}.fired"
    return float(path.read_text().split()[1]) if path.exists() else None


def calls(folder: str | Path, name: str) -> int:
    """How many calls of `name` the run made (its counter file)."""
    path = Path(folder) / f"{name}.count"
    return int(path.read_text() or 0) if path.exists() else 0
