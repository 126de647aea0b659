"""Fixtures for the sandbox attack battery: a self-checked pool and a host-state guard.

Every attack test runs under `host_guard`, which asserts after the test that the host is as
before: no process of a sandbox uid, no per-run cgroup, no scratch mount, no new entry in /
or in the canary directory (world-writable on purpose, so only isolation protects it).
bwrap missing is an error, not a skip: CI installs it.
"""

import os
import shutil
import tempfile

import pytest
from tests.hoststate import leftovers

from tempering.sandbox import Limits, SandboxPool
from tempering.sandbox.base import MiB

ATTACK_LIMITS = Limits(
    wall_s=3,
    cpu_s=2,
    memory_bytes=64 * MiB,
    processes=32,
    file_bytes=4 * MiB,
    scratch_bytes=8 * MiB,
    output_bytes=64 * 1024,
)


@pytest.fixture(scope="session")
def pool():
    # CI runs bwrap; TEMPERING_SANDBOX_BACKEND=nsjail runs the same battery against the fallback
    backend = os.environ.get("TEMPERING_SANDBOX_BACKEND", "bwrap")
    with SandboxPool(backend=backend, size=4, limits=ATTACK_LIMITS) as p:
        p.check()
        yield p


@pytest.fixture(scope="session")
def canary_dir():
    d = tempfile.mkdtemp(prefix="tempering-canary-")
    os.chmod(d, 0o777)
    with open(os.path.join(d, "secret.txt"), "w") as f:
        f.write("TOP-SECRET-CANARY")
    os.chmod(os.path.join(d, "secret.txt"), 0o666)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _snapshot(canary_dir):
    files = {}
    for name in os.listdir(canary_dir):
        with open(os.path.join(canary_dir, name), "rb") as f:
            files[name] = f.read()
    return sorted(os.listdir("/")), files


@pytest.fixture(autouse=True)
def host_guard(pool, canary_dir):
    before = _snapshot(canary_dir)
    yield
    assert leftovers(pool.uids) == {"processes": [], "cgroups": [], "scratch_mounts": []}
    assert _snapshot(canary_dir) == before, "host state changed"
