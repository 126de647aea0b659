"""`SandboxPool`: bounded concurrent runs, one unprivileged uid per slot, health counters,
and `Session`s that keep a scratch filesystem across calls for agents.

Uids are claimed with an flock on /run/tempering-sandbox/uids/<uid>.lock, so two processes on
one machine (say, two Ray workers) never share a uid, and a uid that any live process
already uses is skipped. `RLIMIT_NPROC` counts per uid, so one uid per concurrent run is
what makes the process limit mean "this run's processes".
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import threading
import warnings
from typing import TYPE_CHECKING, Iterator, Literal, Mapping, Sequence

from tempering.sandbox.backends import make_backend
from tempering.sandbox.base import Backend, ExecResult, Job, Limits, SandboxFailure, SandboxUnavailable

if TYPE_CHECKING:
    from tempering.sandbox.selfcheck import CheckReport
from tempering.sandbox.cgroups import CgroupRoot, RunCgroup
from tempering.sandbox.launch import reap_orphans, run_job
from tempering.sandbox.scratch import Scratch

UID_LOCKS = "/run/tempering-sandbox/uids"
UID_BASE, UID_SPAN = 20000, 4096
PYTHON = ("python3", "-E", "-S")  # no site-packages: the standard library only
SANDBOX_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
ARG_MAX_BYTES = 1024 * 1024  # below the kernel's ~2 MiB argv+env, so a refusal is ours, not E2BIG


def _uids_in_use() -> set[int]:
    uids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            pass
    return uids


class UidLease:
    """An exclusive claim on one uid (and the gid of the same number) on this machine."""

    def __init__(self, uid: int, fd: int):
        self.uid, self.gid, self._fd = uid, uid, fd
        self.cgroup: RunCgroup | None = None  # reused by this lease's runs, made on first use
        self.scratch: Scratch | None = None  # reused by a pool slot's runs, reset before each
        self.rebuilds = 0  # times the scratch could not be cleaned and was replaced
        self.broken: str | None = None  # why the last rebuild failed (None: the slot is usable)

    def slot_cgroup(self, root: CgroupRoot) -> RunCgroup | None:
        if self.cgroup is None:
            try:
                self.cgroup = root.slot(self.uid)
            except SandboxFailure:
                return None  # run_job falls back to a fresh cgroup per run
        return self.cgroup

    def slot_scratch(self, size_bytes: int) -> Scratch:
        """This slot's scratch, emptied and verified; rebuilt (fresh tmpfs) if cleaning fails."""
        if self.scratch is not None:
            try:
                self.scratch.reset(size_bytes)
                return self.scratch
            except SandboxFailure:
                pass
        return self.rebuild_scratch(size_bytes)

    def rebuild_scratch(self, size_bytes: int) -> Scratch:
        """A fresh tmpfs for this slot, whatever the old one holds; SandboxFailure marks the slot broken."""
        try:
            if self.scratch is not None:
                self.rebuilds += 1
                try:
                    self.scratch.remount(size_bytes)
                    self.broken = None
                    return self.scratch
                except (SandboxFailure, OSError):
                    self.scratch.destroy()
                    self.scratch = None
            self.scratch = Scratch.create(self.uid, self.gid, size_bytes, name=f"s{os.getpid()}-{self.uid}")
            self.broken = None
            return self.scratch
        except (SandboxFailure, SandboxUnavailable, OSError) as e:
            self.scratch, self.broken = None, f"scratch rebuild failed: {e}"
            raise SandboxFailure(self.broken) from e

    def clean_after_run(self) -> None:
        """Empty the slot scratch now (a run's files never wait on the host); never raises.

        A failure to clean (e.g. a tree too deep to walk) remounts a fresh tmpfs; a failure
        to do that leaves the slot marked broken, and its next run tries again.
        """
        if self.scratch is None:
            return
        try:
            self.scratch.reset(self.scratch.size_bytes)
        except SandboxFailure:
            try:
                self.rebuild_scratch(self.scratch.size_bytes)
            except SandboxFailure:
                pass

    def drop_resources(self) -> None:
        """Unmount the slot scratch and remove the slot cgroup (no run may be in flight)."""
        if self.scratch is not None:
            self.scratch.destroy()
            self.scratch = None
        if self.cgroup is not None:
            self.cgroup.remove(reap=lambda: reap_orphans({self.uid}))
            self.cgroup = None

    @classmethod
    def claim(cls, base: int = UID_BASE, span: int = UID_SPAN, skip: set[int] | None = None) -> UidLease:
        os.makedirs(UID_LOCKS, mode=0o700, exist_ok=True)
        busy = _uids_in_use() | (skip or set())
        for uid in range(base, base + span):
            if uid in busy:
                continue
            fd = os.open(f"{UID_LOCKS}/{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(uid, fd)
            except BlockingIOError:
                os.close(fd)
        raise SandboxUnavailable(f"no free sandbox uid in [{base}, {base + span})")

    def release(self) -> None:
        self.drop_resources()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def build_argv(command: str | Sequence[str] | None, code: str | None) -> tuple[str, ...]:
    """`code` runs as Python (main.py); a str command runs in bash; a list is exec'd as is."""
    if (command is None) == (code is None):
        raise ValueError("give exactly one of `command` (str for bash, list for argv) or `code` (Python source)")
    if code is not None:
        return (*PYTHON, "main.py")
    if isinstance(command, str):
        return ("bash", "-c", command)
    if not command or not all(isinstance(a, str) for a in command):
        raise ValueError(f"command must be a non-empty list of strings, got {command!r}")
    return tuple(command)


class SandboxPool:
    """Runs untrusted programs, at most `size` at a time, each under its own uid.

    Args:
        backend: "bwrap" (default), "nsjail", "auto", "unsafe-local" or a Backend object.
        size: concurrent runs (slots); each slot claims one uid.
        limits: default limits; any call can pass its own.
        uid_base: first uid tried for slots and sessions.

    Raises:
        SandboxUnavailable: the backend is missing, we are not root, or (on the first run)
            the self-check found a leak. The pool then refuses all work.
    """

    def __init__(
        self, backend: str | Backend = "bwrap", size: int = 4, limits: Limits | None = None, uid_base: int = UID_BASE
    ):
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        reason = self.backend.unavailable_reason()
        if reason:
            raise SandboxUnavailable(f"sandbox backend {self.backend.name!r} unavailable: {reason}")
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the sandbox must run as root: it switches to per-slot uids and creates cgroups and scratch mounts"
            )
        self.limits = limits or Limits()
        self.uid_base = uid_base
        self.cgroups = CgroupRoot.find()
        self._leases: list[UidLease] = []
        for _ in range(size):
            self._leases.append(UidLease.claim(uid_base, skip={lease.uid for lease in self._leases}))
        self._free = collections.deque(self._leases)
        self._cond = threading.Condition()
        self._counts: collections.Counter[str] = collections.Counter()
        self._check_lock = threading.Lock()
        self._check_report: CheckReport | Literal["skipped"] | None = None
        self._session_uids: set[int] = set()

    @property
    def uids(self) -> set[int]:
        """Every uid this pool's runs use now (slots and open sessions)."""
        return {lease.uid for lease in self._leases} | self._session_uids

    def check(self) -> CheckReport | None:
        """Run the self-check once (cached); raise SandboxUnavailable if any probe leaked."""
        from tempering.sandbox.selfcheck import run_self_check

        with self._check_lock:
            if self._check_report is None:
                if not self.backend.isolated:
                    self._check_report = "skipped"
                    return None
                report = run_self_check(self)
                if not report.passed:
                    self.close()
                    raise SandboxUnavailable(f"sandbox self-check failed, refusing to run:\n{report.summary()}")
                self._check_report = report
            return None if isinstance(self._check_report, str) else self._check_report  # "skipped"

    def exec(
        self,
        command: str | Sequence[str] | None = None,
        *,
        code: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        limits: Limits | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        """Run a command or Python code in a fresh sandbox and return its `ExecResult`.

        Args:
            command: a bash command line (str) or an argv list.
            code: Python source, run as /work/main.py with the standard library only.
            files: relative path -> content, written into /work first.
            collect: relative paths read back from /work afterwards into `result.files`.

        Raises:
            ValueError: bad arguments, e.g. a NUL byte in the command or `env`, or an env
                name that is empty or holds '=' (see `Job`); nothing is started.
        """
        self.check()
        limits = limits or self.limits
        argv = build_argv(command, code)
        files = dict(files or {})
        if code is not None:
            if "main.py" in files:
                raise ValueError("files must not contain 'main.py' when `code` is given")
            files["main.py"] = code
        with self.slot() as lease:
            return self.run_in(lease, argv, files, limits, stdin=stdin, env=env, collect=collect)

    @contextlib.contextmanager
    def slot(self) -> Iterator[UidLease]:
        """Hold one of the pool's slots (its concurrency bound) for the duration of the block."""
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            lease = self._free.popleft()
        try:
            yield lease
        finally:
            with self._cond:
                self._free.append(lease)
                self._cond.notify()

    def run_in(
        self,
        lease: UidLease,
        argv: Sequence[str],
        files: Mapping[str, bytes | str],
        limits: Limits,
        *,
        scratch: Scratch | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        """One run of `argv` under `lease`'s uid, in `scratch` (None: the slot's own, emptied after).

        For `Session` and the self-check; callers hold a slot (`slot()`). Never raises for what
        the program did: a scratch the program left uncleanable is rebuilt, and the run's
        own result is returned (the damage is the candidate's failure, not the sandbox's).

        Raises:
            ValueError: a NUL byte in `argv` or `env`, or an env name that is empty or holds
                '=' (refused by `Job` before anything is written or started).
        """
        full_env = {**SANDBOX_ENV, **(env or {})}
        try:
            scratch = scratch or lease.slot_scratch(limits.scratch_bytes)
        except SandboxFailure as e:
            return self._count(ExecResult("sandbox_error", error=str(e), backend=self.backend.name))
        try:
            # Job refuses NUL bytes and bad env names (ValueError) before anything is written or started
            job = Job(argv=tuple(argv), env=full_env, uid=lease.uid, gid=lease.gid, workdir=scratch.path, limits=limits)
            size = sum(len(a) + 1 for a in argv) + sum(len(k) + len(v) + 2 for k, v in full_env.items())
            if size > ARG_MAX_BYTES:
                return self._count(
                    ExecResult(
                        "nonzero_exit",
                        exit_code=126,
                        backend=self.backend.name,
                        stderr=f"argument list too long ({size} bytes > {ARG_MAX_BYTES})\n",
                    )
                )
            scratch.write(dict(files))
            result = run_job(self.backend, job, self.cgroups, stdin=stdin, slot=lease.slot_cgroup(self.cgroups))
            if not self.backend.isolated:
                warnings.warn(
                    "ran untrusted-code API with backend 'unsafe-local' (no isolation)", RuntimeWarning, stacklevel=2
                )
            for rel in collect:
                data = scratch.read(rel, limits.output_bytes)
                if data is not None:
                    result.files[rel] = data
            return self._count(result)
        finally:
            if scratch is lease.scratch:
                lease.clean_after_run()

    def open_session_lease(self) -> UidLease:
        """Claim a uid for a `Session` (not one of the slots); give it back with `close_session_lease`."""
        lease = UidLease.claim(self.uid_base, skip=self.uids)
        with self._cond:
            self._session_uids.add(lease.uid)
        return lease

    def close_session_lease(self, lease: UidLease) -> None:
        reap_orphans({lease.uid})
        with self._cond:
            self._session_uids.discard(lease.uid)
        lease.release()

    def session(self, limits: Limits | None = None) -> Session:
        """A sandbox whose /work persists across `exec` calls (for one agent episode)."""
        self.check()
        return Session(self, limits or self.limits)

    def health(self) -> dict:
        """Counts of runs by status, free slots, the self-check state, and slots rebuilt or broken.

        `slot_rebuilds`: scratches a run left uncleanable (e.g. a tree too deep to walk) that
        were replaced by a fresh tmpfs; `broken_slots`: uid -> why its rebuild failed (its
        next run tries again, and reports `sandbox_error` if it cannot).
        """
        with self._cond:
            return {
                "backend": self.backend.name,
                "slots": len(self._leases),
                "free_slots": len(self._free),
                "runs": sum(self._counts.values()),
                "by_status": dict(self._counts),
                "checked": self._check_report is not None,
                "open_sessions": len(self._session_uids),
                "slot_rebuilds": sum(lease.rebuilds for lease in self._leases),
                "broken_slots": {lease.uid: lease.broken for lease in self._leases if lease.broken},
            }

    def close(self) -> None:
        """Release all uids. Runs in flight must have ended."""
        reap_orphans(self.uids)
        for lease in self._leases:
            lease.release()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _count(self, result: ExecResult) -> ExecResult:
        with self._cond:
            self._counts[result.status] += 1
        return result


class Session:
    """A per-episode sandbox: its own uid and a scratch /work that lives until `close()`.

    Each `exec` still takes a pool slot, so sessions share the pool's concurrency bound.
    Calls on one session run one at a time. Processes never outlive a call. Implements
    `tempering.sandbox.base.SandboxSession` through the pool's public methods only.
    """

    def __init__(self, pool: SandboxPool, limits: Limits):
        self.pool, self.limits = pool, limits
        self._lease = pool.open_session_lease()
        try:
            self.scratch = Scratch.create(self._lease.uid, self._lease.gid, limits.scratch_bytes)
        except BaseException:
            pool.close_session_lease(self._lease)
            raise
        self._lock = threading.Lock()
        self.closed = False

    def exec(
        self,
        command: str | Sequence[str] | None = None,
        *,
        code: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        limits: Limits | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        """Like `SandboxPool.exec`, in this session's persistent /work (code goes to main.py)."""
        if self.closed:
            raise RuntimeError("session is closed")
        argv = build_argv(command, code)
        files = dict(files or {})
        if code is not None:
            files["main.py"] = code
        limits = (limits or self.limits).replace(scratch_bytes=self.limits.scratch_bytes)
        with self.pool.slot():  # a concurrency token; the session's own uid runs the job
            with self._lock:
                return self.pool.run_in(
                    self._lease, argv, files, limits, scratch=self.scratch, stdin=stdin, env=env, collect=collect
                )

    def write_file(self, path: str, content: bytes | str) -> None:
        """Write one file into /work (relative path; an existing link is replaced, not followed)."""
        self.write_files({path: content})

    def write_files(self, files: Mapping[str, bytes | str]) -> None:
        with self._lock:
            self.scratch.write(dict(files))

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        """A file from /work (None if missing, a link or not a regular file)."""
        with self._lock:
            return self.scratch.read(path, max_bytes or self.limits.output_bytes)

    def list_files(self) -> list[str]:
        """Regular files under /work (iterative walk, depth and entry caps: see `Scratch.listing`)."""
        with self._lock:
            return self.scratch.listing()

    def close(self) -> None:
        if self.closed:
            return
        with self._lock:
            self.scratch.destroy()
            self.pool.close_session_lease(self._lease)
            self.closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
