"""The per-run and per-slot cgroups carry the run's memory cap to every counter v1 keeps
apart: pages, pages plus swap, and TCP socket buffers (uncapped unless a limit is written)."""

import os

from tests.hoststate import leftovers

from tempering.sandbox.base import MiB
from tempering.sandbox.cgroups import CgroupRoot

UID = 20999  # nothing runs as it: it only names the slot cgroup


def _limit(cg, name):
    with open(f"{cg.path('memory')}/memory.{name}limit_in_bytes") as f:
        return int(f.read())


def test_fresh_run_cgroup_caps_tcp_buffers_at_the_memory_cap():
    cg = CgroupRoot.find().new_run(48 * MiB, 8)
    try:
        assert _limit(cg, "kmem.tcp.") == _limit(cg, "") == 48 * MiB
    finally:
        cg.remove()
    assert leftovers(set())["cgroups"] == []


def test_reused_slot_cgroup_follows_each_runs_cap():
    cg = CgroupRoot.find().slot(UID)
    try:
        for cap in (96 * MiB, 32 * MiB, 200 * MiB):  # grow, shrink, grow
            cg.prepare(cap, 8)
            assert _limit(cg, "kmem.tcp.") == _limit(cg, "") == cap
            if os.path.exists(f"{cg.path('memory')}/memory.memsw.limit_in_bytes"):
                assert _limit(cg, "memsw.") == cap
    finally:
        cg.remove()
