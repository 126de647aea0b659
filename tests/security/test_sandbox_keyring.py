"""Host keyring attack: when the process running Tempering has its own
session keyring (systemd KeyringMode=private, runc, pam_keyinit logins), sandboxed code used to
inherit it through setuid and bwrap, read and overwrite a host key, and leave a key that a
later run under another slot uid could read. A plain shell has no session keyring, so the
host here is a subprocess that joins one and adds a key before it opens its pool."""

import json
import os
import subprocess
import sys

from tempering.sandbox.seccomp import syscall_number

HOST = r"""
import ctypes, json, sys
from tempering.sandbox import Limits, SandboxPool
nr_keyctl, nr_add_key, nr_request_key = (int(a) for a in sys.argv[1:4])
libc = ctypes.CDLL(None, use_errno=True)
SESSION, USER = -3, -4
assert libc.syscall(nr_keyctl, 1, b"tempering-host-session") >= 0, ctypes.get_errno()  # JOIN_SESSION_KEYRING
key = libc.syscall(nr_add_key, b"user", b"host-secret", b"HOST-KEY-VALUE", 14, SESSION)
assert key >= 0, ctypes.get_errno()

ATTACK = '''
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
KEY, NR_KEYCTL, NR_ADD_KEY, NR_REQUEST_KEY = {key}, {nr_keyctl}, {nr_add_key}, {nr_request_key}
out = {{}}
buf = ctypes.create_string_buffer(256)
out["read"] = libc.syscall(NR_KEYCTL, 11, KEY, buf, 256)                      # KEYCTL_READ
out["read_value"] = buf.value.decode("latin-1")
out["update"] = libc.syscall(NR_KEYCTL, 2, KEY, b"OVERWRITTEN", 11)           # KEYCTL_UPDATE
out["search"] = libc.syscall(NR_KEYCTL, 10, -3, b"user", b"host-secret", 0)   # KEYCTL_SEARCH
out["request"] = libc.syscall(NR_REQUEST_KEY, b"user", b"host-secret", None, 0)
out["leave_session"] = libc.syscall(NR_ADD_KEY, b"user", b"left-behind", b"LEFT", 4, -3)
out["leave_user"] = libc.syscall(NR_ADD_KEY, b"user", b"left-behind", b"LEFT", 4, -4)
print(json.dumps(out))
'''
LATER = '''
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
found = [libc.syscall({nr_keyctl}, 10, ring, b"user", b"left-behind", 0) for ring in (-3, -4, -5)]
found.append(libc.syscall({nr_request_key}, b"user", b"left-behind", None, 0))
print(json.dumps(found))
'''
fmt = dict(key=key, nr_keyctl=nr_keyctl, nr_add_key=nr_add_key, nr_request_key=nr_request_key)
with SandboxPool(size=2, limits=Limits(wall_s=10, cpu_s=5)) as pool:
    pool.check()
    first = pool.exec(code=ATTACK.format(**fmt))
    later = pool.exec(code=LATER.format(**fmt))  # the pool's next slot: another uid
    uids = sorted(pool.uids)
buf = ctypes.create_string_buffer(256)
libc.syscall(nr_keyctl, 11, key, buf, 256)
print(json.dumps({"first": [first.status, first.stdout, first.stderr[-500:]],
                  "later": [later.status, later.stdout, later.stderr[-500:]],
                  "host_value": buf.value.decode("latin-1"), "uids": uids}))
"""


def test_host_session_keyring_is_out_of_reach():
    nrs = [str(syscall_number(n)) for n in ("keyctl", "add_key", "request_key")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", HOST, *nrs], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    status, stdout, stderr = doc["first"]
    assert status == "ok", stderr
    attack = json.loads(stdout)
    assert attack["read_value"] == "" and "HOST-KEY" not in stdout
    for what in ("read", "update", "search", "request", "leave_session", "leave_user"):
        assert attack[what] == -1, (what, attack)
    assert doc["host_value"] == "HOST-KEY-VALUE"  # not overwritten
    status, stdout, stderr = doc["later"]
    assert status == "ok" and json.loads(stdout) == [-1, -1, -1, -1], (stdout, stderr)
