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
  minimal /dev (null, zero, random, urandom, tty, ...); a read-only /proc of its own pid
  namespace. /work, /root, /etc/shadow, /sys and the rest of the host filesystem are not
  visible.
- Network: a new network namespace with only its own loopback: host loopback services,
  other interfaces and routes are unreachable. A seccomp filter allows only AF_UNIX,
  AF_INET and AF_INET6 sockets: AF_VSOCK (which no network namespace isolates and which
  reaches a VM's hypervisor), netlink, packet and every other family fail with EAFNOSUPPORT.
- Kernel surface (seccomp, `sandbox/seccomp.py`; nsjail gets the same rules in Kafel):
  io_uring, userfaultfd, bpf, perf_event_open, ptrace, process_vm_readv/writev, pidfd_getfd,
  memfd_secret, fanotify and the keyring calls are refused; syscalls of a foreign ABI (i386,
  x32) kill the process.
- Keyrings: each run joins a fresh anonymous session keyring before exec, and keyctl,
  add_key and request_key are refused, so a host session keyring (systemd
  KeyringMode=private, runc, pam_keyinit) and keys of earlier runs are out of reach.
- Processes and signals: new pid, ipc, uts and cgroup namespaces and a new session;
  host processes cannot be seen, signalled or ptraced; the sandbox's own init cannot be
  ptraced or have its fds taken (pidfd_getfd) either. No process of a run can write another's
  memory: ptrace and process_vm_writev are refused and /proc is read-only, so
  /proc/<pid>/mem cannot be opened for writing. The program therefore cannot rewrite the
  sandbox's init, whose exit status is the run's, nor the shell that runs a checker after
  it, to forge how the run ended. Its command line holds no host path (bwrap reads its
  options from a memfd), and stdin is a pipe read once (not a memfd that /proc/1/fd/0 or
  lseek could rewind). Nothing outlives a run: a per-run cgroup is frozen and SIGKILLed at
  the end, daemons and `setsid` children included.
- Resources: wall time, total CPU (cgroup) and per-process CPU (RLIMIT_CPU), total memory
  including tmpfs (memory cgroup), TCP socket buffers (the cgroup's kernel TCP limit, set to
  the same cap), processes (pids cgroup + RLIMIT_NPROC per uid), file size, open files,
  output bytes (read incrementally, truncated, never buffered whole).
  `Limits` refuses NaN and infinite values (they would pass any comparison unenforced).
- Slot reuse: a reused slot's scratch is emptied by an iterative walk; a tree it cannot
  walk (deeper than 64 levels) gets the tmpfs replaced by a fresh one, so no program can
  break a slot for later runs; its run still returns its own result, and `health()` counts
  rebuilt slots and lists broken ones. Session listings are iterative with a depth cap.
- Environment: the program sees a fresh environment, never the host's variables.
- Launch strings: a NUL byte in any argument, env name or env value, and an env name that is
  empty or holds '=', are refused with ValueError before anything is written or started
  (`Job`, which every backend launches from): bwrap reads its options NUL-separated, so a
  NUL would start options of the caller's choosing (`--bind / /host`).
- Results: `sandbox_error` only when the sandbox itself failed (e.g. bwrap never reported
  the program started, through a channel the program cannot write); program failures
  are `nonzero_exit`, `timeout`, `memory_limit` or `output_limit`.

Not isolated (known and accepted):
- The seccomp filter is a deny list on top of ALLOW, not an allow list: the rest of the
  syscall surface of the kernel is reachable from an unprivileged user namespace, so a
  kernel bug could be an escape. A VM (gVisor, Firecracker) is the answer to kernel
  exploits; it costs far more than the ~ms per run here.
- The nsjail fallback's Kafel filter does not refuse x32 syscall numbers (bit 30 set); on a
  kernel built with CONFIG_X86_X32_ABI they would bypass its deny list. bwrap's does.
- Covert channels between concurrent runs through the shared read-only toolchain inodes:
  flock and inotify are refused, but POSIX record locks stay (a read lock on a toolchain
  file is visible to F_GETLK in another slot; sqlite needs F_GETLK), as do timing channels.
- A run can pass a unix socket to itself over SCM_RIGHTS in a cycle; the kernel frees
  such a cycle only at its next unix-socket garbage collection, so the run's mounts may
  outlive it briefly. Nothing of it is reachable, and the scratch is unmounted (lazily).
- CPU, memory bandwidth, caches and disk I/O of the host are shared; timing side channels
  exist. CPU *time* is capped; CPU *share* is not (no cpu.shares), so runs compete fairly
  only through the pool's concurrency bound.
- The read-only toolchain is visible in full (e.g. other Python packages under /usr, which
  the default `python3 -E -S` keeps off sys.path but a program can still open), and so are
  the `libraries` folders a bwrap backend is given (the verifier context's pool binds the
  interpreter's site-packages under /opt/tempering/lib for reasoning-gym's scorers).
- The kernel's own information in /proc (e.g. /proc/cpuinfo, /proc/meminfo, uptime, kernel
  version) is readable.
- The sandbox's own init (bwrap's pid 1) runs as the same uid: /proc/1, its memory included,
  is readable, not writable (it holds the run's own options and stdio); it holds no
  capabilities. Likewise a program can read, not change, the memory of the shell that
  started it. Files are another matter: a checker that runs after the program in the same
  call reads a /work the program could rewrite; run it in a call of its own, with its
  files written just before.
- Socket buffers are capped apart from pages (cgroup v1 counts them separately), so a run
  can hold up to its cap in pages plus its cap in TCP buffers.
- The `unsafe-local` backend isolates nothing; it exists only for trusted code, is never
  chosen automatically, and warns on every run.
- The harness must run as root (uids, cgroups, scratch mounts) and sets itself as a child
  subreaper (it reaps only zombies owned by sandbox uids).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from tempering.sandbox.backends import BwrapBackend, NsjailBackend, UnsafeLocalBackend, make_backend
from tempering.sandbox.base import (
    STATUSES,
    Backend,
    ExecResult,
    Limits,
    Sandbox,
    SandboxFailure,
    SandboxSession,
    SandboxUnavailable,
    Status,
)
from tempering.sandbox.pool import SandboxPool, Session
from tempering.sandbox.selfcheck import CheckReport, run_self_check

__all__ = [
    "Backend",
    "BwrapBackend",
    "CheckReport",
    "ExecResult",
    "Limits",
    "NsjailBackend",
    "Sandbox",
    "SandboxFailure",
    "SandboxPool",
    "SandboxSession",
    "SandboxUnavailable",
    "STATUSES",
    "Session",
    "Status",
    "UnsafeLocalBackend",
    "default_pool",
    "exec",
    "make_backend",
    "run_self_check",
]

_default_pool: SandboxPool | None = None


def default_pool() -> SandboxPool:
    """The process-wide pool (bwrap, 4 slots), created and self-checked on first use."""
    global _default_pool
    if _default_pool is None:
        _default_pool = SandboxPool()
    return _default_pool


def exec(
    command: str | Sequence[str] | None = None,
    *,
    code: str | None = None,
    files: Mapping[str, bytes | str] | None = None,
    limits: Limits | None = None,
    stdin: bytes = b"",
    collect: Sequence[str] = (),
) -> ExecResult:
    """Run a command or Python code in the default pool. See `SandboxPool.exec`."""
    return default_pool().exec(command, code=code, files=files, limits=limits, stdin=stdin, collect=collect)
