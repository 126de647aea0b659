"""Kernel-surface attacks the namespaces alone do not stop, closed by the seccomp filter bwrap
loads: vsock to the hypervisor, other socket families, io_uring,
userfaultfd, bpf, perf, ptrace, pidfd_getfd on the sandbox's init, keyrings, and the flock /
inotify channels through toolchain inodes every slot shares. Sockets are created only:
nothing is ever connected or sent on vsock."""

import errno
import fcntl
import hashlib
import os

import pytest

from tempering.sandbox.seccomp import DENIED, syscall_number

PY = "import ctypes, errno, os, socket, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def test_vsock_socket_cannot_be_created(pool):
    r = pool.exec(
        code=PY + "try:\n    socket.socket(40, socket.SOCK_STREAM).close()\n    print('VSOCK CREATED')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    assert r.status == "ok" and r.stdout.split() == ["refused", str(errno.EAFNOSUPPORT)]


@pytest.mark.parametrize("family,kind", [(16, 2), (17, 3), (38, 5), (0x100000028, 1), (-1, 1)])
def test_other_socket_families_refused(pool, family, kind):
    # netlink, packet, alg, vsock with high bits set (the kernel truncates to an int), negative
    nr = syscall_number("socket")
    r = pool.exec(
        code=PY + f"fd = libc.syscall({nr}, ctypes.c_long({family}), {kind}, 0)\nprint(fd, ctypes.get_errno())\n"
    )
    assert r.status == "ok" and r.stdout.split() == ["-1", str(errno.EAFNOSUPPORT)]


def test_needed_socket_families_still_work(pool):
    code = PY + (
        "for fam in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):\n    socket.socket(fam).close()\n"
        "a, b = socket.socketpair()\na.sendall(b'x')\nprint(b.recv(1).decode())\n"
        "s = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
        "c = socket.create_connection(s.getsockname())\nprint('loopback ok')\n"
    )
    r = pool.exec(code=code)
    assert r.status == "ok" and r.stdout == "x\nloopback ok\n", r.stderr


@pytest.mark.parametrize("name", sorted(DENIED))
def test_denied_syscalls_return_the_filters_errno(pool, name):
    # called with zero arguments: the kernel itself would mostly answer EFAULT/EINVAL/EBADF or succeed
    nr = syscall_number(name)
    if nr < 0:
        pytest.skip(f"{name} does not exist on this architecture")
    r = pool.exec(code=PY + f"rc = libc.syscall({nr}, 0, 0, 0, 0, 0, 0)\nprint(rc, ctypes.get_errno())\n")
    assert r.status == "ok" and r.stdout.split() == ["-1", str(DENIED[name])]


def test_pidfd_getfd_on_init_cannot_take_its_stdout(pool):
    # bwrap's pid 1 holds the run's real stdout; before the filter this got a copy of it
    code = PY + (
        f"pidfd = os.pidfd_open(1)\nfd = libc.syscall({syscall_number('pidfd_getfd')}, pidfd, 1, 0)\n"
        "print(fd, ctypes.get_errno())\n"
    )
    r = pool.exec(code=code)
    assert r.status == "ok" and r.stdout.split() == ["-1", str(errno.EPERM)]


def test_flock_on_shared_toolchain_inode_carries_no_signal(pool):
    # The host (standing in for another slot) holds an exclusive flock on a toolchain file every
    # slot sees; a run probing it must learn nothing: the answer is the same held or not.
    target = os.path.realpath("/usr/bin/python3")
    probe = PY + (
        f"import fcntl\nf = open({target!r}, 'rb')\n"
        "try:\n    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n    print('free')\n"
        "except OSError as e:\n    print('busy' if e.errno == errno.EWOULDBLOCK else 'refused', e.errno)\n"
    )
    with open(target, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        while_held = pool.exec(code=probe)
    released = pool.exec(code=probe)
    assert while_held.status == released.status == "ok"
    assert while_held.stdout == released.stdout and "busy" not in while_held.stdout


def test_inotify_on_shared_toolchain_refused(pool):
    r = pool.exec(code=PY + "print(libc.inotify_init1(0), ctypes.get_errno())\n")
    assert r.status == "ok" and r.stdout.split() == ["-1", str(errno.ENOSYS)]


def test_proc_1_cmdline_shows_no_host_path(pool):
    r = pool.exec(code="print(open('/proc/1/cmdline', 'rb').read().replace(b'\\0', b' ').decode())\n")
    assert r.status == "ok" and "/run/tempering-sandbox" not in r.stdout and "scratch" not in r.stdout


def test_stdin_cannot_be_read_twice(pool):
    code = (
        "import os, sys\nprint(sys.stdin.read())\n"
        "for how in ('seek', 'proc1', 'procself'):\n    try:\n"
        "        if how == 'seek':\n            os.lseek(0, 0, 0)\n            print(os.read(0, 100).decode())\n"
        "        else:\n            print(open('/proc/1/fd/0' if how == 'proc1' else '/proc/self/fd/0').read())\n"
        "    except OSError as e:\n        print(how, 'refused', e.errno)\n"
    )
    r = pool.exec(code=code, stdin=b"STDIN-ONCE")
    assert r.status == "ok" and r.stdout.count("STDIN-ONCE") == 1, r.stdout


def test_large_stdin_is_fed_in_full(pool):
    data = os.urandom(3 << 20).hex().encode()[: 3 << 20]  # past the pipe's capacity: fed by a thread
    r = pool.exec(code="import sys, hashlib\nprint(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())\n", stdin=data)
    assert r.status == "ok" and r.stdout.strip() == hashlib.sha256(data).hexdigest()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the x32 ABI exists on x86_64 only")
def test_x32_syscalls_cannot_bypass_the_filter(pool):
    if pool.backend.name != "bwrap":
        pytest.skip("nsjail's Kafel filter does not check x32 numbers (documented in the threat model)")
    # x32 numbers (bit 30 set) reach the same kernel code under other numbers; the filter kills them
    r = pool.exec(code=PY + "print('before', flush=True)\nprint(libc.syscall(0x40000000 | 39))\n")
    assert r.status == "nonzero_exit" and r.exit_code == 128 + 31 and r.stdout == "before\n"  # SIGSYS
