"""A self-checked bwrap pool for the agent environment tests (bwrap missing is an error, not a skip)."""

import pytest

from tempering.sandbox import Limits, SandboxPool
from tempering.sandbox.base import MiB


@pytest.fixture(scope="session")
def pool():
    limits = Limits(wall_s=5, cpu_s=3, memory_bytes=128 * MiB, scratch_bytes=8 * MiB, output_bytes=64 * 1024)
    with SandboxPool(backend="bwrap", size=4, limits=limits) as p:
        p.check()
        yield p
