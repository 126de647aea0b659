"""500 runs at 8-way concurrency leave no process, zombie, cgroup or mount behind."""

from concurrent.futures import ThreadPoolExecutor

from tests.hoststate import leftovers


def test_500_runs_8_way(pool):
    def one(i):
        if i % 50 == 0:  # a few that need killing: daemons left running at exit
            return pool.exec(f"sleep 30 & echo {i}")
        return pool.exec(["echo", str(i)])

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(500)))
    assert [r.status for r in results] == ["ok"] * 500
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(500)]
    assert leftovers(pool.uids) == {"processes": [], "cgroups": [], "scratch_mounts": []}
    assert pool.health()["free_slots"] == 8
