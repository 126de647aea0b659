"""One cgroup (v1: memory, pids, freezer, cpuacct) per sandbox run, or one per pool slot reused.

The cgroup is what caps a run as a whole: total memory including tmpfs pages (RLIMIT_AS is
per process and does not see tmpfs) and, at the same cap, TCP socket buffers
(`set_memory_limits`), total processes, total CPU time, and it is how every
process of the run is found and killed, daemons and `setsid` escapees included:
freeze, SIGKILL every member, thaw, wait until empty, remove.

Measured layout on the target machines: a v1 hierarchy per controller under
/sys/fs/cgroup/<controller>, no systemd. cgroup v2 is not supported yet; on a v2-only host
`CgroupRoot.find()` raises `SandboxUnavailable` saying so.

Reuse: a pool slot keeps one cgroup (`CgroupRoot.slot`, named s<pid>-<uid>) across its runs
instead of mkdir/rmdir four cgroups per run. Only one run uses it at a time. Before each run
(`RunCgroup.prepare`) it must be empty (pids.current 0, no member, not frozen), else the run
fails with `SandboxFailure`. What earlier runs left charged is only reclaimable memory (page
cache of the read-only toolchain, slab): scratch and the sandbox's own tmpfs are gone by then,
and the kernel reclaims such pages before it OOM-kills. Above `FORCE_EMPTY_ABOVE` it is
reclaimed (memory.force_empty, ~1 ms); below, it stays charged and is taken as a baseline:
the peak reported is max_usage minus that baseline (as a fresh cgroup would not count pages
already cached either). The peak, failcnt and CPU counters are reset and the OOM-kill count
is taken as a baseline, so no run's CPU time, peak or OOM shows in the next. After each run (`RunCgroup.drain`) every member is
killed and reaped exactly as before removal. The slot's cgroup is removed when the pool closes.
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
FORCE_EMPTY_ABOVE = 16 * 1024 * 1024
"""A reused cgroup still charged with more than this (clean page cache, slab) is emptied first."""
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


def set_memory_limits(mem_dir: str, memory_bytes: int) -> None:
    """Cap a v1 memory cgroup at `memory_bytes`: user and tmpfs pages, swap, and TCP buffers.

    v1 charges socket buffers to a counter of their own (`memory.kmem.tcp.*`), outside
    `memory.limit_in_bytes`, and counts them only once a limit is written: without one, a
    run holding loopback connections it never reads from pins any amount of host memory
    (1 GiB seen against a 64 MiB cap). With it, sends past the cap block or fail with EAGAIN
    and unreadable segments are dropped. So a run holds at most its cap in pages plus its
    cap in TCP buffers. (cgroup v2 charges sockets to memory.max itself.)
    """
    memsw = mem_dir + "/memory.memsw.limit_in_bytes"
    if os.path.exists(memsw):  # lower memsw first when shrinking (memsw >= limit), set it again after
        try:
            _write(memsw, str(memory_bytes))
        except OSError:
            pass
    _write(mem_dir + "/memory.limit_in_bytes", str(memory_bytes))
    if os.path.exists(memsw):  # swap would otherwise let the run exceed its cap
        _write(memsw, str(memory_bytes))
    tcp = mem_dir + "/memory.kmem.tcp.limit_in_bytes"
    if os.path.exists(tcp):  # absent only on kernels without socket accounting
        _write(tcp, str(memory_bytes))


@dataclass(frozen=True)
class CgroupRoot:
    """Where per-run cgroups are made: /sys/fs/cgroup/<controller>/tempering-sandbox."""

    base: str = "/sys/fs/cgroup"

    @classmethod
    def find(cls, base: str = "/sys/fs/cgroup") -> CgroupRoot:
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

    def new_run(self, memory_bytes: int, max_pids: int) -> RunCgroup:
        with _counter_lock:
            name = f"r{os.getpid()}-{next(_counter)}"
        cg = RunCgroup(self, name)
        try:
            for c in CONTROLLERS:
                os.mkdir(cg.path(c))
            set_memory_limits(cg.path("memory"), memory_bytes)
            _write(cg.path("pids") + "/pids.max", str(max_pids))
        except OSError as e:
            cg.remove()
            raise SandboxFailure(f"cannot set up cgroup {name}: {e}") from e
        return cg

    def slot(self, uid: int) -> RunCgroup:
        """The reusable cgroup of one pool slot (made now if missing); `prepare` it before each run."""
        cg = RunCgroup(self, f"s{os.getpid()}-{uid}", reusable=True)
        try:
            for c in CONTROLLERS:
                try:
                    os.mkdir(cg.path(c))
                except FileExistsError:
                    pass
        except OSError as e:
            cg.remove()
            raise SandboxFailure(f"cannot set up cgroup {cg.name}: {e}") from e
        return cg


@dataclass
class RunCgroup:
    root: CgroupRoot
    name: str
    reusable: bool = False
    _limits: tuple[int, int] | None = None
    _oom_base: int = 0
    _mem_base: int = 0

    def prepare(self, memory_bytes: int, max_pids: int) -> None:
        """Make a reused cgroup ready for the next run: verified empty, limits set, counters reset."""
        try:
            if (
                int(_read(self.path("pids") + "/pids.current")) != 0
                or self.pids()
                or _read(self.path("freezer") + "/freezer.state").strip() != "THAWED"
            ):
                raise SandboxFailure(f"cgroup {self.name} is not empty and thawed before a run")
            mem = self.path("memory")
            if int(_read(mem + "/memory.usage_in_bytes")) > FORCE_EMPTY_ABOVE:
                _write(mem + "/memory.force_empty", "0")  # reclaim what earlier runs left charged
            if self._limits != (memory_bytes, max_pids):
                self._limits = None
                set_memory_limits(mem, memory_bytes)
                _write(self.path("pids") + "/pids.max", str(max_pids))
                self._limits = (memory_bytes, max_pids)
            for f in ("memory.max_usage_in_bytes", "memory.failcnt"):
                _write(f"{mem}/{f}", "0")
            _write(self.path("cpuacct") + "/cpuacct.usage", "0")
            self._mem_base = int(_read(mem + "/memory.usage_in_bytes"))
            self._oom_base = self._oom_fields().get("oom_kill", 0)
        except (OSError, ValueError) as e:
            raise SandboxFailure(f"cannot reset cgroup {self.name}: {e}") from e

    def drain(self, reap=None, timeout_s: float = 5.0) -> None:
        """Kill and reap every member; return once pids.current is 0 (the cgroup stays)."""
        self.kill_all()
        self._wait_empty(reap, timeout_s)

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
            return max(0, int(_read(self.path("memory") + "/memory.max_usage_in_bytes")) - self._mem_base)
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        """True when the kernel's OOM killer acted inside this cgroup (its memory cap was hit) this run."""
        fields = self._oom_fields()
        return fields.get("oom_kill", 0) > self._oom_base or fields.get("under_oom") == 1

    def _oom_fields(self) -> dict[str, int]:
        try:
            text = _read(self.path("memory") + "/memory.oom_control")
        except OSError:
            return {}
        return {k: int(v) for k, v in (line.split() for line in text.splitlines() if len(line.split()) == 2)}

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
        deadline = self._wait_empty(reap, timeout_s)
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

    def _wait_empty(self, reap, timeout_s: float) -> float:
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
            time.sleep(0.0002)
        return deadline
