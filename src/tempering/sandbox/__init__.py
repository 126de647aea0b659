"""tempering.sandbox — run untrusted, model-written code and commands in isolation.

    from tempering.sandbox import SandboxPool, Limits
    with SandboxPool(size=8) as pool:
        r = pool.exec(code="print(1)", limits=Limits(wall_s=5))      # -> ExecResult
        with pool.session() as s:                                    # agents: /work persists
            s.exec("echo hi > notes.txt"); s.exec("cat notes.txt")

Threat model (what is isolated, what is not, and why)
-----------------------------------------------------
The adversary is the program: model-written code that may try to read secrets, reach the
network, damage the host, exhaust resources or outlive its run. The host harness (this
package, running as root), the kernel and the bubblewrap/nsjail binaries are trusted.

Isolated, and proven by tests/security/ and the start-up self-check:
- Identity: each concurrent run has its own unprivileged uid (20000+, claimed per slot), no
  supplementary groups, no capabilities, no-new-privs, no nested user namespaces.
- Filesystem: new mount namespace; read-only binds of a toolchain (/usr, /etc/alternatives,
  /etc/ld.so.cache); / is read-only; /work, /tmp and /dev/shm are size-capped tmpfs; a
  minimal /dev (null, zero, random, urandom, tty, ...); a /proc of its own pid namespace.
  /work, /root, /etc/shadow, /sys and the rest of the host filesystem are not visible.
- Network: a new network namespace with only its own loopback: host loopback services,
  other interfaces and routes are unreachable; raw and packet sockets are refused.
- Processes and signals: new pid, ipc, uts and cgroup namespaces and a new session;
  host processes cannot be seen, signalled or ptraced. Nothing outlives a run: a per-run
  cgroup is frozen and SIGKILLed at the end, daemons and `setsid` children included.
- Resources: wall time, total CPU (cgroup) and per-process CPU (RLIMIT_CPU), total memory
  including tmpfs (memory cgroup), processes (pids cgroup + RLIMIT_NPROC per uid), file
  size, open files, output bytes (read incrementally, truncated, never buffered whole).
- Environment: the program sees a fresh environment, never the host's variables.
- Results: `sandbox_error` only when the sandbox itself failed (e.g. bwrap never reported
  the program started, through a channel the program cannot write); program failures
  are `nonzero_exit`, `timeout`, `memory_limit` or `output_limit`.

Not isolated (known and accepted):
- No seccomp filter with bwrap: the full syscall surface of the kernel is reachable from an
  unprivileged user namespace, so a kernel bug could be an escape. A VM (gVisor, Firecracker)
  is the answer to kernel exploits; it costs far more than the ~ms per run here.
- CPU, memory bandwidth, caches and disk I/O of the host are shared; timing side channels
  exist. CPU *time* is capped; CPU *share* is not (no cpu.shares), so runs compete fairly
  only through the pool's concurrency bound.
- The read-only toolchain is visible in full (e.g. other Python packages under /usr, which
  the default `python3 -E -S` keeps off sys.path but a program can still open).
- The kernel's own information in /proc (e.g. /proc/cpuinfo, /proc/meminfo, uptime, kernel
  version) is readable.
- The sandbox's own init (bwrap's pid 1, same uid) can be ptraced by the program; it holds
  no capabilities and no-new-privs, so this gains nothing beyond what the program has.
- The `unsafe-local` backend isolates nothing; it exists only for trusted code, is never
  chosen automatically, and warns on every run.
- The harness must run as root (uids, cgroups, scratch mounts) and sets itself as a child
  subreaper (it reaps only zombies owned by sandbox uids).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from tempering.sandbox.backends import BwrapBackend, NsjailBackend, UnsafeLocalBackend, make_backend
from tempering.sandbox.base import (STATUSES, Backend, ExecResult, Limits, Sandbox, SandboxFailure,
                                    SandboxSession, SandboxUnavailable, Status)
from tempering.sandbox.pool import SandboxPool, Session
from tempering.sandbox.selfcheck import CheckReport, run_self_check

__all__ = [
    "Backend", "BwrapBackend", "CheckReport", "ExecResult", "Limits", "NsjailBackend", "Sandbox", "SandboxFailure",
    "SandboxPool", "SandboxSession", "SandboxUnavailable", "STATUSES", "Session", "Status", "UnsafeLocalBackend",
    "default_pool", "exec", "make_backend", "run_self_check",
]

_default_pool: SandboxPool | None = None


def default_pool() -> SandboxPool:
    """The process-wide pool (bwrap, 4 slots), created and self-checked on first use."""
    global _default_pool
    if _default_pool is None:
        _default_pool = SandboxPool()
    return _default_pool


def exec(command: str | Sequence[str] | None = None, *, code: str | None = None,  # noqa: A001
         files: Mapping[str, bytes | str] | None = None, limits: Limits | None = None,
         stdin: bytes = b"", collect: Sequence[str] = ()) -> ExecResult:
    """Run a command or Python code in the default pool. See `SandboxPool.exec`."""
    return default_pool().exec(command, code=code, files=files, limits=limits, stdin=stdin, collect=collect)
