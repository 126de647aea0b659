"""The seccomp filter every bwrap run gets (`bwrap --seccomp FD`), compiled with libseccomp.

Why: the network namespace does not isolate every socket family (AF_VSOCK reaches the
hypervisor of a VM whatever the namespace), and some syscalls reach shared kernel state or
large attack surface that a test program never needs. The filter is a deny list on top of
ALLOW, plus an allow list of socket families:

- `socket()`: only AF_UNIX, AF_INET and AF_INET6 (the isolated loopback); every other family
  (vsock, netlink, packet, bluetooth, alg, ...) fails with EAFNOSUPPORT, as on a kernel built
  without it. Python and bash never open netlink at start-up; glibc's getaddrinfo falls back
  when AF_NETLINK is refused. `socketpair()`: AF_UNIX only.
- keyrings (`keyctl`, `add_key`, `request_key`): EPERM. Together with the fresh session
  keyring the launcher joins, no host or earlier-run key is reachable.
- kernel surface with a history of escapes or cross-process reach: io_uring, userfaultfd,
  bpf, perf_event_open, ptrace, pidfd_getfd, memfd_secret, fanotify: ENOSYS/EPERM.
- writing another process's memory: ptrace, process_vm_readv/writev (EPERM). Every process
  of a run has the same uid, so without this the program could rewrite the sandbox's init
  (pid 1, whose exit status is the run's) or the shell that runs a checker after it, and
  forge the result. The path-based way in, /proc/<pid>/mem, is shut by mounting the
  sandbox's /proc read-only (`backends.BwrapBackend`; nsjail mounts it read-only too).
- cross-slot channels through the shared read-only toolchain inodes: `flock` (ENOLCK) and
  inotify (ENOSYS); fcntl record locks stay (their write locks need a writable file).

Syscalls of a foreign architecture (i386 `int 0x80`, x32) kill the process (libseccomp's
bad-arch default), so the 32-bit entry points cannot bypass the list. The compiled program is
cached per process; each run gets its own memfd copy (bwrap reads and closes it).
"""

from __future__ import annotations

import errno
import functools
import os

from tempering.sandbox.base import SandboxUnavailable

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
DENIED = {
    "keyctl": errno.EPERM,
    "add_key": errno.EPERM,
    "request_key": errno.EPERM,
    "ptrace": errno.EPERM,
    "process_vm_readv": errno.EPERM,
    "process_vm_writev": errno.EPERM,
    "pidfd_getfd": errno.EPERM,
    "bpf": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "io_uring_setup": errno.ENOSYS,
    "io_uring_enter": errno.ENOSYS,
    "io_uring_register": errno.ENOSYS,
    "userfaultfd": errno.ENOSYS,
    "memfd_secret": errno.ENOSYS,
    "fanotify_init": errno.EPERM,
    "inotify_init": errno.ENOSYS,
    "inotify_init1": errno.ENOSYS,
    "flock": errno.ENOLCK,
}
"""Syscall name -> errno returned instead of running it."""
ALLOWED_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
MAX_FAMILY = 64  # AF_MAX is 46 on 6.x kernels; everything at or above this is refused by one rule


def _seccomp_module():
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except (ImportError, RuntimeError) as e:  # RuntimeError: the binding found no libseccomp.so
        raise SandboxUnavailable(
            f"cannot build the sandbox seccomp filter: {e} (pip install pyseccomp; apt-get install -y libseccomp2)"
        ) from e
    return pyseccomp


@functools.lru_cache(maxsize=1)
def filter_bpf() -> bytes:
    """The compiled BPF program (native architecture), built once per process."""
    sc = _seccomp_module()
    flt = sc.SyscallFilter(sc.ALLOW)
    for name, err in DENIED.items():
        if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:  # older kernels/libseccomp may lack one
            flt.add_rule(sc.ERRNO(err), name)
    refuse = sc.ERRNO(errno.EAFNOSUPPORT)
    for family in range(MAX_FAMILY):
        if family not in ALLOWED_FAMILIES:
            flt.add_rule(refuse, "socket", sc.Arg(0, sc.EQ, family))
        if family != AF_UNIX:
            flt.add_rule(refuse, "socketpair", sc.Arg(0, sc.EQ, family))
    # 64-bit compare: any value with high bits set (the kernel would truncate it to an int) is refused too
    flt.add_rule(refuse, "socket", sc.Arg(0, sc.GE, MAX_FAMILY))
    flt.add_rule(refuse, "socketpair", sc.Arg(0, sc.GE, MAX_FAMILY))
    fd = os.memfd_create("tempering-seccomp-build", os.MFD_CLOEXEC)
    with open(fd, "w+b", closefd=True) as buf:  # a memfd, not a pipe: no size limit, no deadlock
        flt.export_bpf(buf)
        buf.seek(0)
        return buf.read()


def filter_fd() -> int:
    """A fresh memfd holding the program, at offset 0 (the caller passes it with pass_fds and closes it)."""
    return memfd_with("tempering-seccomp", filter_bpf())


def memfd_with(name: str, data: bytes) -> int:
    """A close-on-exec memfd holding `data`, at offset 0 (subprocess's pass_fds clears CLOEXEC in the child only)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def syscall_number(name: str) -> int:
    """The native syscall number of `name` (-1 if unknown here or libseccomp is missing)."""
    try:
        sc = _seccomp_module()
    except SandboxUnavailable:
        return -1
    return sc.resolve_syscall(sc.Arch.NATIVE, name)


def kafel_policy() -> str:
    """The same rules in nsjail's Kafel syntax (nsjail compiles its own filter), plus no nested userns."""
    by_errno: dict[int, list[str]] = {
        errno.EPERM: ["unshare", "setns", "clone { (clone_flags & 0x10000000) == 0x10000000 }"]
    }
    for name, err in DENIED.items():
        by_errno.setdefault(err, []).append(name)
    allowed = " && ".join(f"family != {f}" for f in ALLOWED_FAMILIES)
    by_errno.setdefault(errno.EAFNOSUPPORT, []).extend(
        [f"socket {{ {allowed} }}", f"socketpair {{ family != {AF_UNIX} }}"]
    )
    return " ".join(f"ERRNO({err}) {{ {', '.join(names)} }}" for err, names in by_errno.items()) + " DEFAULT ALLOW"
