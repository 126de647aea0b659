"""One cgroup (v1: memory, pids, freezer, cpuacct) per sandbox run.

The cgroup is what caps a run as a whole: total memory including tmpfs pages (RLIMIT_AS is
per process and does not see tmpfs), total processes, total CPU time, and it is how every
process of the run is found and killed, daemons and `setsid` escapees included:
freeze, SIGKILL every member, thaw, wait until empty, remove.

Measured layout on the target machines: a v1 hierarchy per controller under
/sys/fs/cgroup/<controller>, no systemd. cgroup v2 is not supported yet; on a v2-only host
`CgroupRoot.find()` raises `SandboxUnavailable` saying so.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass

from tempering.sandbox.base import SandboxFailure, SandboxUnavailable

CONTROLLERS = ("memory", "pids", "freezer", "cpuacct")
PARENT = "tempering-sandbox"
_counter = itertools.count()
_counter_lock = threading.Lock()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


@dataclass(frozen=True)
class CgroupRoot:
    """Where per-run cgroups are made: /sys/fs/cgroup/<controller>/tempering-sandbox."""

    base: str = "/sys/fs/cgroup"

    @classmethod
    def find(cls, base: str = "/sys/fs/cgroup") -> "CgroupRoot":
        missing = [c for c in CONTROLLERS if not os.path.exists(f"{base}/{c}/cgroup.procs")]
        if missing:
            raise SandboxUnavailable(
                f"cgroup v1 controllers {missing} not mounted under {base}; the sandbox needs "
                f"memory, pids, freezer and cpuacct v1 hierarchies (cgroup v2 is not supported yet)"
            )
        root = cls(base)
        for c in CONTROLLERS:
            try:
                os.makedirs(root.parent(c), exist_ok=True)
            except OSError as e:
                raise SandboxUnavailable(f"cannot create cgroup {root.parent(c)}: {e} (run as root)") from e
        return root

    def parent(self, controller: str) -> str:
        return f"{self.base}/{controller}/{PARENT}"

    def run_names(self) -> set[str]:
        """Names of the per-run cgroups that exist now (any process's)."""
        names: set[str] = set()
        for c in CONTROLLERS:
            try:
                names |= {n for n in os.listdir(self.parent(c)) if n.startswith("r")}
            except FileNotFoundError:
                pass
        return names

    def new_run(self, memory_bytes: int, max_pids: int) -> "RunCgroup":
        with _counter_lock:
            name = f"r{os.getpid()}-{next(_counter)}"
        cg = RunCgroup(self, name)
        try:
            for c in CONTROLLERS:
                os.mkdir(cg.path(c))
            _write(cg.path("memory") + "/memory.limit_in_bytes", str(memory_bytes))
            memsw = cg.path("memory") + "/memory.memsw.limit_in_bytes"
            if os.path.exists(memsw):  # swap would otherwise let the run exceed its cap
                _write(memsw, str(memory_bytes))
            _write(cg.path("pids") + "/pids.max", str(max_pids))
        except OSError as e:
            cg.remove()
            raise SandboxFailure(f"cannot set up cgroup {name}: {e}") from e
        return cg


@dataclass
class RunCgroup:
    root: CgroupRoot
    name: str

    def path(self, controller: str) -> str:
        return f"{self.root.parent(controller)}/{self.name}"

    def join_files(self) -> list[str]:
        """The files a (single-threaded) child writes "0" into to join this cgroup before exec.

        `tasks`, not `cgroup.procs`: moving only the calling thread skips the global
        threadgroup lock, whose RCU grace period cost ~20 ms per run here.
        """
        return [self.path(c) + "/tasks" for c in CONTROLLERS]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self.path("pids") + "/cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def cpu_s(self) -> float | None:
        try:
            return int(_read(self.path("cpuacct") + "/cpuacct.usage")) / 1e9
        except (OSError, ValueError):
            return None

    def peak_memory(self) -> int | None:
        try:
            return int(_read(self.path("memory") + "/memory.max_usage_in_bytes"))
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        """True when the kernel's OOM killer acted inside this cgroup (its memory cap was hit)."""
        try:
            text = _read(self.path("memory") + "/memory.oom_control")
        except OSError:
            return False
        fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(fields.get("oom_kill", 0)) > 0 or fields.get("under_oom") == "1"

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """Freeze, SIGKILL every member, thaw. Frozen tasks cannot fork, so nothing slips out."""
        if not self.pids():
            return
        state = self.path("freezer") + "/freezer.state"
        _write(state, "FROZEN")
        deadline = time.monotonic() + timeout_s
        while _read(state).strip() != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.001)
        for pid in (int(p) for p in _read(self.path("freezer") + "/cgroup.procs").split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _write(state, "THAWED")

    def remove(self, reap=None, timeout_s: float = 5.0) -> None:
        """Remove the cgroup once empty. `reap()` is called while waiting (zombies hold pids)."""
        deadline = time.monotonic() + timeout_s
        # pids.current drops only when a task is released (reaped), so 0 means no process
        # and no zombie of this run is left anywhere.
        current = self.path("pids") + "/pids.current"
        while os.path.exists(current) and int(_read(current)) > 0:
            if time.monotonic() > deadline:
                raise SandboxFailure(f"processes of cgroup {self.name} did not go away: pids {self.pids()}")
            if reap is not None:
                reap()
            self.kill_all()
            time.sleep(0.001)
        for c in CONTROLLERS:
            path = self.path(c)
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise SandboxFailure(f"cannot remove cgroup {path}: {e}; pids {self.pids()}") from e
                    if reap is not None:
                        reap()
                    self.kill_all()
                    time.sleep(0.002)
