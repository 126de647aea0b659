"""The `Sandbox` / `SandboxSession` protocols: the pool and its sessions satisfy them
structurally, an agent-style episode works through the protocol alone, and `Session` needs
nothing private of the pool. Also: `Limits` refuses values it could never enforce, and the
self-check refuses a bwrap sandbox without the seccomp filter (vsock reachable)."""

import inspect
import math

import pytest

from tempering.sandbox import BwrapBackend, Limits, Sandbox, SandboxPool, SandboxSession, SandboxUnavailable, Session


def _params(fn) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_pool_and_session_satisfy_the_protocols_structurally(pool):
    assert isinstance(pool, Sandbox)
    for name in ("exec", "session", "health", "close"):
        assert _params(getattr(SandboxPool, name)) == _params(getattr(Sandbox, name)), name
    with pool.session() as s:
        assert isinstance(s, SandboxSession)
        for name in ("exec", "read_file", "write_file", "write_files", "list_files", "close"):
            assert _params(getattr(Session, name)) == _params(getattr(SandboxSession, name)), name


def agent_episode(sandbox: Sandbox) -> tuple[str, bytes | None, list[str]]:
    """What an environment does between model turns, written against the protocol only."""
    with sandbox.session() as s:
        s.write_file("task.txt", "2 3\n")
        s.exec("read a b < task.txt; echo $((a * b)) > answer.txt")
        r = s.exec(code="print(open('answer.txt').read().strip())")
        return r.stdout, s.read_file("answer.txt"), s.list_files()


def test_an_episode_runs_through_the_protocol(pool):
    stdout, answer, files = agent_episode(pool)
    assert stdout == "6\n" and answer == b"6\n" and files == ["answer.txt", "main.py", "task.txt"]


class PublicOnly:
    """The pool as a remote proxy would expose it: no attribute starting with '_'."""

    def __init__(self, pool):
        self._pool = pool

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(f"private pool attribute {name!r} used")
        return getattr(self._pool, name)


def test_session_uses_only_the_pools_public_methods(pool):
    s = Session(PublicOnly(pool), pool.limits)
    try:
        assert s.exec("echo hi > f; cat f").stdout == "hi\n"
        assert s.read_file("f") == b"hi\n"
    finally:
        s.close()
    assert pool.health()["open_sessions"] == 0


@pytest.mark.parametrize("field", ["wall_s", "cpu_s", "memory_bytes", "scratch_bytes"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_limits_refuse_values_they_cannot_enforce(field, bad):
    with pytest.raises(ValueError, match=field):
        Limits(**{field: bad})
    with pytest.raises(ValueError):
        Limits.parse(f"{field}={bad}")


def test_selfcheck_refuses_bwrap_without_seccomp():
    leaky = SandboxPool(backend=BwrapBackend(seccomp=False), size=1)
    with pytest.raises(SandboxUnavailable, match="AF_VSOCK"):
        leaky.check()
