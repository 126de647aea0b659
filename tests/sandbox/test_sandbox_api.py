"""The sandbox's public behaviour: statuses, files in/out, stdin, sessions, limits, CLI."""

import json
import os
import warnings

import pytest
from tests.hoststate import leftovers, processes_of
from typer.testing import CliRunner

from tempering.sandbox import BwrapBackend, Limits, SandboxPool, SandboxUnavailable, UnsafeLocalBackend
from tempering.sandbox.base import Job
from tempering.sandbox.cli import app
from tempering.sandbox.scratch import scratch_mounts


def test_code_runs_with_stdlib_only(pool):
    r = pool.exec(code="import json, sys\nprint(json.dumps([1, 2]))\nprint([p for p in sys.path if 'packages' in p])\n")
    assert r.status == "ok" and r.exit_code == 0 and r.stdout == "[1, 2]\n[]\n"
    assert r.backend == "bwrap" and r.cpu_s is not None and r.peak_memory_bytes > 0


def test_bash_command_and_toolchain(pool):
    r = pool.exec("echo hi | tr a-z A-Z; ls /usr/bin/python3 >/dev/null && echo py")
    assert r.status == "ok" and r.stdout == "HI\npy\n"


def test_nonzero_exit_is_the_programs(pool):
    r = pool.exec(code="import sys\nprint('bwrap: fake sandbox message', file=sys.stderr)\nsys.exit(3)\n")
    assert r.status == "nonzero_exit" and r.exit_code == 3  # faking bwrap's words fools nobody


def test_missing_command_is_the_programs(pool):
    r = pool.exec(["no-such-binary-xyz"])
    assert r.status == "nonzero_exit"


def test_files_in_and_out(pool):
    r = pool.exec(
        "cat data/in.txt > out.txt; echo more >> out.txt",
        files={"data/in.txt": "hello\n"},
        collect=["out.txt", "missing.txt"],
    )
    assert r.status == "ok" and r.files == {"out.txt": b"hello\nmore\n"}


def test_files_out_are_capped(pool):
    r = pool.exec("head -c 200000 /dev/zero > big", collect=["big"], limits=pool.limits.replace(output_bytes=1000))
    assert len(r.files["big"]) == 1000


def test_files_in_bigger_than_scratch_raise(pool):
    with pytest.raises(ValueError, match="scratch"):
        pool.exec(["true"], files={"big": b"x" * (9 * 1024 * 1024)})


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a//b", ""])
def test_bad_file_paths_raise(pool, bad):
    with pytest.raises(ValueError):
        pool.exec(["true"], files={bad: "x"})


def test_stdin(pool):
    r = pool.exec(code="import sys\nprint(sys.stdin.read().upper())\n", stdin=b"abc")
    assert r.stdout == "ABC\n"


def test_exactly_one_of_command_or_code(pool):
    with pytest.raises(ValueError):
        pool.exec("true", code="pass")
    with pytest.raises(ValueError):
        pool.exec()


def test_session_keeps_scratch_across_calls(pool):
    with pool.session() as s:
        assert s.exec("echo 1 > counter").ok
        s.write_files({"add.py": "n = int(open('counter').read())\nopen('counter', 'w').write(str(n + 1))\n"})
        assert s.exec(["python3", "add.py"]).ok
        assert s.exec(code="print(open('counter').read())").stdout == "2\n"
        assert s.read_file("counter") == b"2" and "add.py" in s.list_files()
        uid = s._lease.uid
        assert uid in pool.uids
    assert uid not in pool.uids
    assert leftovers(pool.uids | {uid}) == {"processes": [], "cgroups": [], "scratch_mounts": []}


def test_sessions_are_isolated_from_each_other(pool):
    with pool.session() as a, pool.session() as b:
        a.exec("echo secret-a > mine")
        r = b.exec("ls /work; cat mine")
        assert "secret-a" not in r.stdout


def test_limits_parse():
    lim = Limits.parse("wall_s=2.5,memory_bytes=64M,output_bytes=4K")
    assert lim.wall_s == 2.5 and lim.memory_bytes == 64 * 1024 * 1024 and lim.output_bytes == 4096
    with pytest.raises(ValueError, match="nope"):
        Limits.parse("nope=1")
    with pytest.raises(ValueError, match="positive"):
        Limits(wall_s=0)


def test_sandbox_error_when_backend_cannot_start(pool):
    broken = SandboxPool(backend=BwrapBackend(binary="false"), size=1)
    try:
        broken._check_report = "skipped"  # go straight to a run: the backend exits 1 before any sandbox exists
        r = broken.exec(code="print(1)")
        assert r.status == "sandbox_error" and "failed to set up" in r.error
    finally:
        broken.close()


def test_selfcheck_refuses_without_network_isolation():
    leaky = SandboxPool(backend=BwrapBackend(isolate_network=False), size=1)
    with pytest.raises(SandboxUnavailable, match="network"):
        leaky.exec(code="print(1)")
    with pytest.raises(SandboxUnavailable):
        leaky.exec(code="print(1)")  # stays refused


def test_selfcheck_refuses_when_host_dirs_are_bound():
    leaky = SandboxPool(backend=BwrapBackend(toolchain=("/usr", "/run")), size=1)
    with pytest.raises(SandboxUnavailable, match="host read"):
        leaky.check()


def test_unsafe_local_is_explicit_and_warns():
    with SandboxPool(backend=UnsafeLocalBackend(), size=1) as local:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = local.exec(code="print(6 * 7)")
        assert r.stdout == "42\n" and any("unsafe-local" in str(w.message) for w in caught)


def test_health_counts(pool):
    before = pool.health()["by_status"].get("ok", 0)
    pool.exec(["true"])
    h = pool.health()
    assert h["by_status"]["ok"] == before + 1 and h["slots"] == 8 and h["checked"]


def test_cli_run_and_check():
    runner = CliRunner()
    res = runner.invoke(app, ["run", "--limits", "wall_s=5", "--", "python3", "-c", "print(40 + 2)"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["stdout"] == "42\n"
    res = runner.invoke(app, ["check"])
    assert res.exit_code == 0 and "PASS" in res.output
    res = runner.invoke(app, ["run", "--limits", "bogus=1", "--", "true"])
    assert res.exit_code != 0


def test_slot_reuse_leaks_nothing_between_runs():
    """A slot's reused scratch and cgroup carry no files, processes, CPU, peak or OOM into the next run."""
    from tempering.sandbox import SandboxPool
    from tempering.sandbox.base import Limits

    with SandboxPool(size=1) as p:
        first = p.exec(
            "mkdir -p d/e; echo s > d/e/f; echo t > .hidden; ln -s /etc/passwd l; chmod 777 /work; "
            "(setsid sleep 600 &) ; python3 -c 'x = bytearray(64 << 20); import time; time.sleep(0.3)'"
        )
        assert first.ok, first
        assert first.peak_memory_bytes > 60 << 20
        lease = p._leases[0]
        assert lease.scratch is not None and lease.cgroup is not None
        assert os.listdir(lease.scratch.path) == []
        assert lease.cgroup.pids() == [] and not processes_of({lease.uid})
        bomb = p.exec(code="x = bytearray(1 << 30)", limits=Limits(memory_bytes=128 << 20))
        assert bomb.status == "memory_limit", bomb
        second = p.exec("ls -A /work; stat -c %a /work; cat /proc/[0-9]*/comm | grep -c sleep; true")
        assert second.ok, second
        assert second.stdout == "700\n0\n", second.stdout  # empty /work, mode reset, no sleeper left
        assert second.cpu_s < 1.0 and second.peak_memory_bytes < 60 << 20, second
        ran_with = (lease.scratch, lease.cgroup)
    assert ran_with[0].path not in {m for m in scratch_mounts()}
    assert not any(os.path.exists(ran_with[1].path(c)) for c in ("memory", "pids", "freezer", "cpuacct"))


@pytest.mark.parametrize(
    "argv,env",
    [
        (("echo", "a\0b"), {}),
        (("echo",), {"K": "v\0--bind\0/\0/host"}),
        (("echo",), {"K\0": "v"}),
        (("echo",), {"K=V": "v"}),
        (("echo",), {"": "v"}),
        (("echo",), {"K": 1}),
    ],
    ids=["nul-in-argv", "nul-in-value", "nul-in-name", "equals-in-name", "empty-name", "not-a-string"],
)
def test_job_refuses_what_no_backend_passes_on_faithfully(argv, env):
    with pytest.raises(ValueError, match=r"^sandbox (argv\[\d+\]|env) .*without NUL"):
        Job(argv=argv, env=env, uid=20000, gid=20000, workdir="/tmp", limits=Limits())
