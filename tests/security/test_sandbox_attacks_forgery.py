"""Forging a run's result from inside: rewriting the memory of the sandbox's init (pid 1,
whose exit status is the run's) or of the shell that runs a trusted checker after the
program. Every process of a run has the same uid, so only the read-only /proc and the
seccomp filter stand in the way. Each program exits 7 after its attempt; the run must
report exactly that, and the checker must still run."""

import errno
import platform

import pytest

from tempering.sandbox.seccomp import syscall_number

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the injected code is x86-64")

# mov edi, 0; mov eax, 231; syscall: exit_group(0), written where the target resumes
EXIT_ZERO = "bf00000000b8e70000000f05"

PATCH_VIA_PROC_MEM = f"""
import os, sys
target = int(sys.argv[1]) if len(sys.argv) > 1 else 1
try:
    pc = int(open(f'/proc/{{target}}/syscall').read().split()[-1], 16)  # where it resumes
    fd = os.open(f'/proc/{{target}}/mem', os.O_RDWR)
    os.pwrite(fd, bytes.fromhex('{EXIT_ZERO}'), pc)
    print('PATCHED', target, flush=True)
except OSError as e:
    print('refused', target, e.errno, flush=True)
sys.exit(7)
"""


def test_init_memory_cannot_be_rewritten_to_report_success(pool):
    r = pool.exec(code=PATCH_VIA_PROC_MEM)
    assert r.stdout.split() == ["refused", "1", str(errno.EROFS)]
    assert r.status == "nonzero_exit" and r.exit_code == 7


def test_checker_after_the_program_still_decides(pool):
    # The shape of an agent goal: the agent's program, then a trusted checker that fails.
    # The program patches its parent shell so the shell would exit 0 before the checker.
    files = {"agent.py": PATCH_VIA_PROC_MEM, "check.py": "print('checker ran')\nraise SystemExit(1)\n"}
    with pool.session() as s:
        r = s.exec('python3 -E -S agent.py "$$"; python3 -E -S check.py', files=files)
    assert r.stdout.splitlines()[0].split()[::2] == ["refused", str(errno.EROFS)]
    assert "checker ran" in r.stdout
    assert r.status == "nonzero_exit" and r.exit_code == 1


def test_process_vm_calls_cannot_reach_init(pool):
    # Read a word of pid 1's stack and write it back: harmless, but either call succeeding
    # means the program can rewrite init's return addresses.
    code = f"""
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
sp = int(open('/proc/1/syscall').read().split()[-2], 16)
buf = ctypes.create_string_buffer(8)
local, remote = iovec(ctypes.addressof(buf), 8), iovec(sp, 8)
for name, nr in (('readv', {syscall_number("process_vm_readv")}), ('writev', {syscall_number("process_vm_writev")})):
    rc = libc.syscall(nr, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    print(name, rc, ctypes.get_errno() if rc < 0 else 0)
sys.exit(7)
"""
    r = pool.exec(code=code)
    assert r.stdout.splitlines() == [f"readv -1 {errno.EPERM}", f"writev -1 {errno.EPERM}"]
    assert r.status == "nonzero_exit" and r.exit_code == 7


def test_ptrace_cannot_attach_to_init_or_poke_it(pool):
    code = f"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
pc = int(open('/proc/1/syscall').read().split()[-1], 16)
word = int.from_bytes(bytes.fromhex('{EXIT_ZERO}')[:8], 'little')
for name, req, addr, data in (('attach', 16, None, None), ('seize', 0x4206, None, None), ('poketext', 4, pc, word)):
    rc = libc.ptrace(req, 1, addr, data)
    print(name, rc, ctypes.get_errno() if rc < 0 else 0)
sys.exit(7)
"""
    r = pool.exec(code=code)
    assert [line.split()[1] for line in r.stdout.splitlines()] == ["-1", "-1", "-1"]
    assert r.status == "nonzero_exit" and r.exit_code == 7
