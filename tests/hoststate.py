"""What a sandbox could leave behind on the host: the leak checks of the sandbox and security tests (test-only)."""

from __future__ import annotations

import os

from tempering.sandbox.cgroups import CONTROLLERS, PARENT
from tempering.sandbox.scratch import scratch_mounts


def processes_of(uids: set[int]) -> list[tuple[int, int, str, int]]:
    """(pid, uid, state, ppid) of every process on the host owned by one of `uids`, zombies included."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                text = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "-1 ").split()[0])
        if uid in uids:
            found.append((int(pid), uid, fields.get("State", "?").strip()[:1], int(fields.get("PPid", "0"))))
    return found


def run_cgroups_of_this_process(base: str = "/sys/fs/cgroup") -> list[str]:
    """Per-run cgroups made by this process that still exist."""
    prefix = f"r{os.getpid()}-"
    left = []
    for c in CONTROLLERS:
        try:
            left += [f"{c}/{n}" for n in os.listdir(f"{base}/{c}/{PARENT}") if n.startswith(prefix)]
        except FileNotFoundError:
            pass
    return left


def leftovers(uids: set[int]) -> dict[str, list]:
    """Processes, cgroups and scratch mounts left by this process's sandbox runs (all empty if clean)."""
    return {
        "processes": processes_of(uids),
        "cgroups": run_cgroups_of_this_process(),
        "scratch_mounts": [m for m in scratch_mounts() if os.path.basename(m).startswith(f"{os.getpid()}-")],
    }


def session_cgroups_of_this_process(keep_uids: set[int], base: str = "/sys/fs/cgroup") -> list[str]:
    """Reusable cgroups (`s<pid>-<uid>`, pool slots and sessions) of this process whose uid is not in `keep_uids`.

    A closed session removes its cgroup; pass the pool's `uids` (its slots, once no session is open).
    """
    prefix = f"s{os.getpid()}-"
    left = []
    for c in CONTROLLERS:
        try:
            names = os.listdir(f"{base}/{c}/{PARENT}")
        except FileNotFoundError:
            continue
        left += [f"{c}/{n}" for n in names if n.startswith(prefix) and int(n[len(prefix) :]) not in keep_uids]
    return left
