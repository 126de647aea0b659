"""Releases, aliases, rollback and the canary decision, on SQLite and on PostgreSQL."""

import multiprocessing
import os

import pytest

from tempering.runs.registry import Registry
from tempering.runs.releases import ReleaseError, Releases

PASSED = {"passed": True, "rules": [{"rule": "arith.accuracy >= base - 0.01", "passed": True, "detail": "0.8 >= 0.5"}]}
FAILED = {
    "passed": False,
    "rules": [{"rule": "arith.accuracy >= base - 0.01", "passed": False, "detail": "candidate 0.2, required >= 0.5"}],
}
NON_INFERIOR = {
    "passed": True,
    "rules": [{"rule": "non-inferior on arith within 0.05", "passed": True, "detail": "arith +0.01 [-0.02, 0.04]"}],
}
INFERIOR = {
    "passed": False,
    "rules": [{"rule": "non-inferior on arith within 0.05", "passed": False, "detail": "arith -0.1 [-0.15, -0.05]"}],
}


def model(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    (d / "model.safetensors").write_bytes(name.encode())
    return d


@pytest.fixture
def releases(registry_location):
    reg = Registry(registry_location)
    yield Releases(reg)
    reg.close()


def test_promotion_refuses_a_checkpoint_whose_gate_did_not_pass(tmp_path, releases):
    m = model(tmp_path, "m")
    with pytest.raises(
        ReleaseError,
        match=r"gate did not pass, not released: arith.accuracy >= base - 0.01 "
        r"\(candidate 0.2, required >= 0.5\)",
    ):
        releases.promote(m, gate=FAILED)
    with pytest.raises(ReleaseError, match="expected a gate verdict"):
        releases.promote(m, gate={"passed": "yes"})
    assert releases.list() == [] and releases.current() is None


def test_versions_aliases_and_rollback(tmp_path, releases):
    m1, m2, m3 = (model(tmp_path, n) for n in ("m1", "m2", "m3"))
    r1 = releases.promote(m1, gate=PASSED)
    r2 = releases.promote(m2, gate=PASSED)
    assert (r1.version, r2.version) == (1, 2) and releases.resolve("production").model == str(m2.resolve())
    assert [r.status for r in releases.list()] == ["production", "retired"]
    assert r2.model_sha256 and r2.model_sha256 != r1.model_sha256 and r2.gate == PASSED
    assert releases.rollback().version == 1
    assert [r.status for r in releases.list()] == ["rolled_back", "production"]
    with pytest.raises(ReleaseError, match="'production' is v1, its first release: nothing to roll back to"):
        releases.rollback()
    releases.promote(m3, gate=PASSED)
    assert releases.rollback(reason="bad outputs").version == 1  # back to what v3 replaced, not to v2
    assert [(e.action, e.release, e.previous) for e in releases.history("production")] == [
        ("promote", 1, None),
        ("promote", 2, 1),
        ("rollback", 1, 2),
        ("promote", 3, 1),
        ("rollback", 1, 3),
    ]
    with pytest.raises(ReleaseError, match="no release is 'candidate'"):
        releases.resolve("candidate")


def test_a_non_inferior_canary_is_promoted(tmp_path, releases):
    releases.promote(model(tmp_path, "prod"), gate=PASSED)
    cand = releases.promote(model(tmp_path, "cand"), gate=PASSED, alias="candidate")
    assert cand.status == "candidate" and releases.resolve("production").version == 1  # stays candidate until decided
    decision = releases.decide(NON_INFERIOR)
    assert decision.promoted and decision.release.version == cand.version and "[-0.02, 0.04]" in decision.reason
    assert releases.resolve("production").version == cand.version and releases.current("candidate") is None
    assert releases.get(cand.version).canary_gate == NON_INFERIOR
    assert releases.rollback().version == 1  # a promoted canary can still be rolled back


@pytest.mark.parametrize(
    "verdict, why",
    [
        (INFERIOR, "canary gate failed: non-inferior on arith within 0.05"),
        (PASSED, "no 'non-inferior on <suite-or-track> within <margin>' rule"),  # passing, but shows nothing
    ],
)
def test_a_canary_not_shown_non_inferior_is_rolled_back(tmp_path, releases, verdict, why):
    releases.promote(model(tmp_path, "prod"), gate=PASSED)
    old = releases.promote(model(tmp_path, "old-cand"), gate=PASSED, alias="candidate")
    releases.decide(NON_INFERIOR)  # old-cand graduated: candidate is empty again
    cand = releases.promote(model(tmp_path, "cand"), gate=PASSED, alias="candidate")
    decision = releases.decide(verdict)
    assert not decision.promoted and why in decision.reason
    assert releases.get(cand.version).status == "rolled_back" and releases.current("candidate") is None
    assert releases.resolve("production").version == old.version
    with pytest.raises(ReleaseError, match="no release is 'candidate': nothing to decide"):
        releases.decide(NON_INFERIOR)


def _state(releases):
    return ([(r.version, r.status) for r in releases.list()], [(e.alias, e.release) for e in releases.history()])


@pytest.mark.parametrize("operation", ["promote", "rollback", "decide"])
def test_a_crash_between_moving_the_alias_and_recording_it_changes_nothing(tmp_path, releases, monkeypatch, operation):
    releases.promote(model(tmp_path, "m1"), gate=PASSED)
    releases.promote(model(tmp_path, "m2"), gate=PASSED)
    releases.promote(model(tmp_path, "m3"), gate=PASSED, alias="candidate")
    before = _state(releases)

    def crash(*args, **kwargs):
        raise RuntimeError("injected crash after the statuses moved, before the alias event")

    monkeypatch.setattr(Releases, "_record_move", crash)
    with pytest.raises(RuntimeError, match="injected crash"):
        if operation == "promote":
            releases.promote(model(tmp_path, "m4"), gate=PASSED)
        elif operation == "rollback":
            releases.rollback()
        else:
            releases.decide(NON_INFERIOR)
    assert _state(releases) == before
    monkeypatch.undo()
    assert releases.resolve("production").version == 2 and releases.rollback().version == 1  # still usable


def _promote_then_die(location, path):
    def die(*args, **kwargs):
        os._exit(9)  # the process vanishes mid-transaction: no rollback code runs

    Releases._record_move = die
    with Registry(location) as reg:
        Releases(reg).promote(path, gate=PASSED)


def test_a_process_killed_mid_promotion_leaves_the_previous_release(tmp_path, releases, registry_location):
    releases.promote(model(tmp_path, "m1"), gate=PASSED)
    before = _state(releases)
    proc = multiprocessing.get_context("spawn").Process(
        target=_promote_then_die, args=(registry_location, model(tmp_path, "m2"))
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == 9
    assert _state(releases) == before
    assert releases.promote(model(tmp_path, "m3"), gate=PASSED).version >= 2 and releases.rollback().version == 1


def test_without_a_verdict_the_newest_recorded_gate_decides(tmp_path, releases):
    m = model(tmp_path, "m")
    with pytest.raises(ReleaseError, match="no gate verdict recorded for it"):
        releases.promote(m)
    report = tmp_path / "gate.json"
    report.write_text("{}")
    releases.registry.record_eval(m, report, gate=PASSED)
    failed = releases.registry.record_eval(m, report, gate=FAILED)
    with pytest.raises(ReleaseError, match="gate did not pass"):
        releases.promote(m)
    passed = releases.registry.record_eval(m, report, gate=PASSED)
    assert failed < passed and releases.promote(m).eval_id == passed


def _promoter(location, paths, barrier):
    with Registry(location) as reg:
        releases = Releases(reg)
        barrier.wait()
        for path in paths:
            releases.promote(path, gate=PASSED)


def test_two_processes_promoting_at_once_keep_one_consistent_history(tmp_path, releases, registry_location):
    ctx, n = multiprocessing.get_context("spawn"), 10
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_promoter, args=(registry_location, [model(tmp_path, f"{t}{i}") for i in range(n)], barrier))
        for t in "ab"
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    moves = releases.history("production")
    assert len(moves) == 2 * n and len(releases.list()) == 2 * n
    # each move starts from where the one before it left the alias: no lost or crossed update
    assert [m.previous for m in moves] == [None] + [m.release for m in moves[:-1]]
    assert [r.status for r in releases.list()].count("production") == 1
