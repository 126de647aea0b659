"""Start one sandboxed job, watch it, end it, clean up, and say how it ended.

This is shared by every backend: the backend only builds the command line.

- The child joins a fresh cgroup, sets its rlimits, drops to the slot uid (no groups),
  joins a fresh anonymous session keyring and starts a new session before it execs the
  backend (bwrap/nsjail), so everything the program ever forks is capped, counted and
  killable, and no host keyring is inherited.
- stdin is a pipe, written at once or by a feeder thread, so it can be read only once.
- Output is read as it comes and capped; past the cap the run is killed (`output_limit`).
  Reading stops when the main process exits: a daemon holding the pipe cannot stall us.
- Wall and total CPU time are polled; past either the run is killed (`timeout`).
- At the end the cgroup is frozen, all members SIGKILLed, thawed and removed (a pool slot's
  reused cgroup is instead waited on until empty, and reset and verified before its next run).
- The harness is a child subreaper: sandbox processes orphaned by the backend are
  re-parented to us and reaped here (otherwise each run leaves a zombie that counts against
  the slot uid's process limit). Only zombies owned by sandbox uids are reaped, so exit
  statuses of the host program's own subprocesses are never stolen.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import resource
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from tempering import faults
from tempering.sandbox.base import Backend, ExecResult, Job, SandboxFailure
from tempering.sandbox.cgroups import CgroupRoot, RunCgroup

PR_SET_CHILD_SUBREAPER = 36
KEYCTL_JOIN_SESSION_KEYRING = 1
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls into it
BACKEND_PROCS = 4  # bwrap's own processes (outer, pid 1) plus slack, on top of Limits.processes
POLL_S = 0.05
F_SETPIPE_SZ = 1031
STDIN_PIPE_MAX = 1024 * 1024  # /proc/sys/fs/pipe-max-size default; root may exceed it, we don't
_owned_lock = threading.Lock()
_owned_pids: set[int] = set()  # our direct children: subprocess reaps those, never us
_subreaper_done = False


def become_subreaper() -> None:
    global _subreaper_done
    if not _subreaper_done:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise SandboxFailure(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
        _subreaper_done = True


def _proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def reap_orphans(uids: set[int]) -> int:
    """Reap zombie children owned by sandbox `uids` that we did not start directly."""
    reaped = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    children: set[int] = set()
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                children.update(int(p) for p in f.read().split())
        except OSError:
            continue
    with _owned_lock:
        children -= _owned_pids
    for pid in children:
        if _proc_uid(pid) in uids:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
            except ChildProcessError:
                pass
    return reaped


def _rlimits(job: Job) -> list[tuple[int, int]]:
    lim = job.limits
    cpu = max(1, int(lim.cpu_s + 0.999))
    return [
        (resource.RLIMIT_AS, lim.memory_bytes + 1024 * 1024 * 1024),  # backstop; the cgroup is the cap
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NPROC, lim.processes + BACKEND_PROCS),
        (resource.RLIMIT_FSIZE, lim.file_bytes),
        (resource.RLIMIT_NOFILE, lim.open_files),
        (resource.RLIMIT_CORE, 0),
    ]


def _child_setup(join_files: list[str], rlimits: list[tuple[int, int]], uid: int, gid: int) -> None:
    """Runs in the forked child before exec: join cgroup, set limits, drop privileges."""
    for path in join_files:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)
    for res, value in rlimits:
        if res == resource.RLIMIT_CPU:
            resource.setrlimit(res, (value, value + 1))  # SIGXCPU first, SIGKILL a second later
        else:
            resource.setrlimit(res, (value, value))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    join_fresh_session_keyring()


def join_fresh_session_keyring() -> None:
    """Leave the harness's session keyring for a new anonymous one (owned by the slot uid).

    Without this a run inherits the host's session keyring (systemd KeyringMode=private,
    runc, pam_keyinit logins) and possesses its keys. The seccomp filter also refuses every
    keyring syscall; this covers backends without our filter (nsjail, unsafe-local).
    """
    if SYS_KEYCTL is None:
        return
    if _libc.syscall(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        if err != errno.ENOSYS:  # a kernel without keyrings has nothing to leak
            raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")


@dataclass
class _Stream:
    cap: int
    data: bytearray
    total: int = 0

    def add(self, chunk: bytes) -> bool:
        """Keep up to the cap; True once more than the cap arrived."""
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)
        return self.total > self.cap


def _stdin_fd(data: bytes) -> int | None:
    """Read end of a pipe that yields `data` once (a memfd could be re-read via /proc/1/fd/0).

    Up to the pipe's capacity is written at once; more is fed by a thread that ends when
    the data is written or the run's last reader is gone (EPIPE).
    """
    if not data:
        return None
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        capacity = fcntl.fcntl(write_fd, F_SETPIPE_SZ, min(max(len(data), 4096), STDIN_PIPE_MAX))
    except OSError:
        capacity = 65536
    if len(data) <= capacity:
        os.write(write_fd, data)
        os.close(write_fd)
    else:
        threading.Thread(target=_feed, args=(write_fd, data), name="sandbox-stdin", daemon=True).start()
    return read_fd


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # EPIPE: the program ended without reading everything
        pass
    finally:
        os.close(fd)


def run_job(
    backend: Backend, job: Job, cgroups: CgroupRoot, stdin: bytes = b"", slot: RunCgroup | None = None
) -> ExecResult:
    """Run `job` with `backend` and return its result. Never raises for program behaviour.

    `slot`: a reusable cgroup (`CgroupRoot.slot`) used by one run at a time; it is verified
    empty and reset before the run and drained (all members killed and reaped) after it.
    Without one, a fresh cgroup is made and removed.
    """
    become_subreaper()
    started = time.monotonic()
    mem, pids = job.limits.memory_bytes, job.limits.processes + BACKEND_PROCS
    try:
        cg = slot
        if slot is not None:
            try:
                slot.prepare(mem, pids)
            except SandboxFailure:
                cg = slot = None  # not provably clean: leave it alone, use a fresh cgroup this time
        if cg is None:
            cg = cgroups.new_run(mem, pids)
    except SandboxFailure as e:
        return ExecResult("sandbox_error", error=str(e), backend=backend.name)
    try:
        result = _run_in_cgroup(backend, job, cg, stdin, started)
    finally:
        try:
            cg.kill_all()
            if slot is not None:
                cg.drain(reap=lambda: reap_orphans({job.uid}))
            else:
                cg.remove(reap=lambda: reap_orphans({job.uid}))
        except (SandboxFailure, OSError) as e:
            result = ExecResult("sandbox_error", error=f"cleanup failed: {e}", backend=backend.name)
    reap_orphans({job.uid})
    return result


def _run_in_cgroup(backend: Backend, job: Job, cg: RunCgroup, stdin: bytes, started: float) -> ExecResult:
    launch = backend.prepare(job)
    stdin_fd = _stdin_fd(stdin)
    try:
        proc = subprocess.Popen(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd,
            pass_fds=launch.pass_fds,
            stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: _child_setup(cg.join_files(), _rlimits(job), job.uid, job.gid),
        )
    except (OSError, subprocess.SubprocessError) as e:
        for fd in (*launch.pass_fds, launch.report_fd):
            if fd is not None:
                os.close(fd)
        return ExecResult("sandbox_error", error=f"cannot start {launch.argv[0]}: {e}", backend=backend.name)
    finally:
        if stdin_fd is not None:
            os.close(stdin_fd)
    with _owned_lock:
        _owned_pids.add(proc.pid)
    for fd in launch.pass_fds:
        os.close(fd)
    faults.point("sandbox", pid=proc.pid)  # the fault battery's hook (tempering/faults.py); off without its env
    try:
        return _watch(backend, job, cg, proc, launch, started)
    finally:
        cg.kill_all()
        proc.wait()
        with _owned_lock:
            _owned_pids.discard(proc.pid)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        if launch.report_fd is not None:
            os.close(launch.report_fd)


def _watch(backend: Backend, job: Job, cg: RunCgroup, proc: subprocess.Popen, launch, started: float) -> ExecResult:
    lim = job.limits
    out, err = _Stream(lim.output_bytes, bytearray()), _Stream(lim.output_bytes, bytearray())
    pidfd = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    for pipe, stream in ((proc.stdout, out), (proc.stderr, err)):
        if pipe is not None:  # both are pipes (`_start`)
            sel.register(pipe, selectors.EVENT_READ, stream)
    sel.register(pidfd, selectors.EVENT_READ, None)
    killed_for, next_cpu_check = "", started + POLL_S
    try:
        exited = False
        while not exited and not killed_for:
            for key, _ in sel.select(POLL_S):
                if key.data is None:
                    exited = True
                elif _read_into(sel, key, key.data):
                    killed_for = "output_limit"
            now = time.monotonic()
            if now - started > lim.wall_s:
                killed_for = killed_for or "timeout"
            elif now >= next_cpu_check:
                next_cpu_check = now + POLL_S
                cpu = cg.cpu_s()
                if cpu is not None and cpu > lim.cpu_s:
                    killed_for = killed_for or "timeout"
        if exited and not killed_for:  # drain what is already buffered, never wait for daemons
            for key in list(sel.get_map().values()):
                if key.data is not None:
                    os.set_blocking(key.fd, False)
                    while _read_into(sel, key, key.data, once=False) is None:
                        pass
            killed_for = "output_limit" if max(out.total, err.total) > lim.output_bytes else ""
    finally:
        sel.close()
        os.close(pidfd)
    if not exited:
        cg.kill_all()
    proc.wait()
    report = _read_report(launch.report_fd)
    return _classify(backend, job, cg, proc.returncode, report, out, err, killed_for, started)


def _read_into(sel, key, stream: _Stream, once: bool = True) -> bool | None:
    """Read one chunk into `stream`. True: over the cap. None (once=False): more may follow."""
    try:
        chunk = os.read(key.fd, 65536)
    except BlockingIOError:
        return False
    if not chunk:
        sel.unregister(key.fileobj)
        return False
    if stream.add(chunk):
        return True
    return False if once else None


def _read_report(fd: int | None) -> bytes:
    if fd is None:
        return b""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _classify(
    backend: Backend,
    job: Job,
    cg: RunCgroup,
    returncode: int | None,
    report: bytes,
    out: _Stream,
    err: _Stream,
    killed_for: str,
    started: float,
) -> ExecResult:
    set_up, exit_code = backend.parse_report(report)
    # An isolated backend's own process (bwrap, nsjail) is outside the program's pid namespace:
    # the program cannot signal it, so its death by a signal we did not send is the host's doing
    # (an operator, the OOM killer outside the cgroup, a crashed supervisor), not the program's.
    supervisor_killed = backend.isolated and exit_code is None and returncode is not None and returncode < 0
    if exit_code is None and returncode is not None:
        exit_code = returncode if returncode >= 0 else 128 - returncode
    result = ExecResult(
        status="ok",
        exit_code=exit_code,
        stdout=out.data.decode("utf-8", "replace"),
        stderr=err.data.decode("utf-8", "replace"),
        stdout_truncated=out.total > len(out.data),
        stderr_truncated=err.total > len(err.data),
        wall_s=time.monotonic() - started,
        cpu_s=cg.cpu_s(),
        peak_memory_bytes=cg.peak_memory(),
        backend=backend.name,
    )
    if cg.oom_killed():
        result.status, result.error = "memory_limit", f"memory cap of {job.limits.memory_bytes} bytes reached"
    elif killed_for == "output_limit":
        result.status, result.error = "output_limit", f"output passed {job.limits.output_bytes} bytes"
    elif killed_for == "timeout" or (result.cpu_s or 0) >= job.limits.cpu_s or exit_code == 128 + signal.SIGXCPU:
        result.status = "timeout"
        result.error = f"wall limit {job.limits.wall_s}s or CPU limit {job.limits.cpu_s}s reached"
    elif not set_up:
        result.status = "sandbox_error"
        result.error = f"{backend.name} failed to set up the sandbox: {result.stderr.strip()[-500:]}"
    elif supervisor_killed and returncode is not None:  # killed by a signal: returncode < 0
        result.status = "sandbox_error"
        result.error = f"the {backend.name} process was killed (signal {-returncode}) from outside the sandbox"
    elif exit_code != 0:
        result.status = "nonzero_exit"
    return result
