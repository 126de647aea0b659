"""Start-up self-check: before serving work, prove isolation with probes that must fail.

Probes (each is checked from inside *and* on the host where possible):
- identity: runs as a non-root uid with no effective capabilities;
- network: cannot connect to a listener the check opens on host 127.0.0.1 (and the
  listener saw no connection); no interface but `lo`, no route (read from /sys/class/net,
  /proc/net/dev and /proc/net/route without sending anything);
- host read: cannot read a world-readable secret file placed on the host, nor /etc/shadow;
- host write: cannot create a file in a world-writable host directory or in /;
- memory: allocating 4x the memory cap ends with status `memory_limit`;
- vsock: an AF_VSOCK socket cannot be created (created only: nothing is connected or sent);
- keyring: keyctl cannot reach a session keyring and add_key cannot add a key;
- slot reuse: a 1,200-deep directory tree does not break the slot: the next run on it is ok
  and sees an empty /work.

Nothing is ever sent beyond 127.0.0.1. Permissions are opened wide on purpose (0644 secret,
0777 dir) so that only the sandbox's mount isolation, not file modes, can stop the probe.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field

from tempering.sandbox.base import Limits, MiB
from tempering.sandbox.seccomp import syscall_number

PROBE = r"""
import ctypes, json, os, socket, sys
port, secret, outdir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
nr_keyctl, nr_add_key = int(sys.argv[4]), int(sys.argv[5])
leaks = []
status = open("/proc/self/status").read()
uid = int(status.split("Uid:")[1].split()[0])
capeff = int(status.split("CapEff:")[1].split()[0], 16)
if uid == 0 or capeff != 0:
    leaks.append(f"identity: uid {uid}, effective caps {capeff:#x}")
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    leaks.append(f"network: connected to host listener 127.0.0.1:{port}")
    s.close()
except OSError:
    pass
ifaces = set(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else set()
ifaces |= {l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]}
if ifaces - {"lo"}:
    leaks.append(f"network: interfaces visible: {sorted(ifaces)}")
routes = open("/proc/net/route").read().splitlines()[1:]
if routes:
    leaks.append(f"network: {len(routes)} routes visible, e.g. {routes[0]!r}")
try:
    socket.socket(40, socket.SOCK_STREAM).close()  # AF_VSOCK: created only, never connected
    leaks.append("network: an AF_VSOCK socket can be created (it reaches the VM's hypervisor)")
except OSError:
    pass
libc = ctypes.CDLL(None, use_errno=True)
if nr_keyctl >= 0 and libc.syscall(nr_keyctl, 0, -3, 0) >= 0:  # KEYCTL_GET_KEYRING_ID, session
    leaks.append("keyring: keyctl reached a session keyring")
if nr_add_key >= 0 and libc.syscall(nr_add_key, b"user", b"tempering-probe", b"x", 1, -3) >= 0:
    leaks.append("keyring: add_key added a key to the session keyring")
for path in (secret, "/etc/shadow"):
    try:
        open(path, "rb").read(1)
        leaks.append(f"host read: read {path}")
    except OSError:
        pass
for path in (os.path.join(outdir, "escaped"), "/escaped-tempering-probe"):
    try:
        open(path, "w").write("x")
        leaks.append(f"host write: created {path} (inside view)")
    except OSError:
        pass
print(json.dumps(leaks))
"""

CHECK_DIR = "/run/tempering-sandbox"  # not /tmp: the sandbox mounts its own /tmp over it
MEMORY_PROBE = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))\n"


@dataclass
class CheckReport:
    backend: str
    leaks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.leaks and not self.errors

    def summary(self) -> str:
        lines = [f"backend {self.backend}: {'PASS' if self.passed else 'FAIL'}"]
        lines += [f"  leak: {x}" for x in self.leaks] + [f"  error: {x}" for x in self.errors]
        return "\n".join(lines)


def run_self_check(pool) -> CheckReport:
    """Run the probes through `pool` (bypassing its own check) and report what leaked."""
    report = CheckReport(pool.backend.name)
    os.makedirs(CHECK_DIR, mode=0o711, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="selfcheck-", dir=CHECK_DIR)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        os.chmod(workdir, 0o777)
        secret = os.path.join(workdir, "secret")
        with open(secret, "w") as f:
            f.write("host secret")
        os.chmod(secret, 0o644)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        _probe_isolation(pool, report, port, secret, workdir)
        try:
            conn, _ = listener.accept()
            conn.close()
            report.leaks.append("network: the host listener accepted a connection from the sandbox")
        except BlockingIOError:
            pass
        for path in (os.path.join(workdir, "escaped"), "/escaped-tempering-probe"):
            if os.path.exists(path):
                report.leaks.append(f"host write: {path} exists on the host")
                os.unlink(path)
        _probe_memory(pool, report)
        _probe_deep_tree(pool, report)
    finally:
        listener.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def _probe_isolation(pool, report: CheckReport, port: int, secret: str, workdir: str) -> None:
    limits = Limits(wall_s=20, cpu_s=10, memory_bytes=128 * MiB)
    with pool.slot() as lease:
        argv = (
            "python3",
            "-E",
            "-S",
            "probe.py",
            str(port),
            secret,
            workdir,
            str(syscall_number("keyctl")),
            str(syscall_number("add_key")),
        )
        res = pool.run_in(lease, argv, {"probe.py": PROBE}, limits)
    if res.status != "ok":
        report.errors.append(
            f"isolation probe ended {res.status} (exit {res.exit_code}): {res.error} {res.stderr.strip()[-300:]}"
        )
        return
    try:
        report.leaks += json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report.errors.append(f"isolation probe printed no verdict: {res.stdout[-300:]!r}")


def _probe_memory(pool, report: CheckReport) -> None:
    cap = 64 * MiB
    limits = Limits(wall_s=20, cpu_s=10, memory_bytes=cap)
    with pool.slot() as lease:
        res = pool.run_in(lease, ("python3", "-E", "-S", "main.py"), {"main.py": MEMORY_PROBE}, limits)
    if res.status != "memory_limit":
        report.leaks.append(
            f"memory: allocating past a {cap >> 20} MiB cap ended {res.status!r}, "
            f"not 'memory_limit' (peak {res.peak_memory_bytes})"
        )


DEEP_TREE = "import os\nfor _ in range({depth}):\n    os.mkdir('d')\n    os.chdir('d')\nprint('built')\n"


def _probe_deep_tree(pool, report: CheckReport, depth: int = 1200) -> None:
    """A run that nests directories `depth` deep must not poison its slot for the next run."""
    limits = Limits(wall_s=20, cpu_s=10, memory_bytes=128 * MiB)
    with pool.slot() as lease:
        try:
            first = pool.run_in(
                lease, ("python3", "-E", "-S", "main.py"), {"main.py": DEEP_TREE.format(depth=depth)}, limits
            )
            after = pool.run_in(
                lease,
                ("python3", "-E", "-S", "main.py"),
                {"main.py": "import os\nprint(sorted(os.listdir('.')))\n"},
                limits,
            )
        except Exception as e:
            report.leaks.append(f"slot reuse: a {depth}-deep directory tree made the pool raise {e!r}")
            return
    if first.status != "ok":
        report.errors.append(f"deep-tree probe ended {first.status}: {first.error} {first.stderr[-300:]}")
    elif after.status != "ok" or after.stdout.strip() != "['main.py']":
        report.leaks.append(
            f"slot reuse: after a {depth}-deep tree the next run on that slot ended "
            f"{after.status} seeing {after.stdout.strip()[:200]!r} ({after.error})"
        )
