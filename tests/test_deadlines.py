"""Deadlines, heartbeats and fault injection (tempering/deadlines.py, tempering/faults.py), and a
stuck reward thread stopping the run with one line (docs/scale.md, No silent hangs)."""

import threading
import time

import pytest

from tempering import faults
from tempering.config import GRPOConfig
from tempering.deadlines import DaemonThreads, Watchdog, WorkerStuck
from tempering.rollout.rollout import ThreadRewardWorkers
from tempering.types import Task


def test_fault_specs_name_a_point_a_kind_and_a_call():
    assert faults.parse("engine:hang:3, sandbox:kill:1") == {"engine": ("hang", 3), "sandbox": ("kill", 1)}
    for bad in (
        "engine:hang",
        "gpu:hang:1",
        "engine:melt:1",
        "engine:hang:0",
        "reward_thread:kill:1",
        "tinker_worker:kill:1",
    ):
        with pytest.raises(ValueError, match="TEMPERING_FAULTS"):
            faults.parse(bad)


def test_a_fault_fires_at_its_call_once_counted_across_calls(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(faults.ENV, "engine:slow:3")
    monkeypatch.setattr(faults, "SLOW_S", 0.0)
    seen = [faults.due("engine") for _ in range(5)]
    assert seen == [None, None, "slow", None, None]
    assert faults.calls(tmp_path, "engine") == 5 and faults.calls(tmp_path, "sandbox") == 0
    faults.point("sandbox")  # counted, nothing due
    assert faults.fired(tmp_path, "sandbox") is None and faults.calls(tmp_path, "sandbox") == 1


def test_faults_are_off_without_their_folder_and_refused_without_it_when_asked_for(monkeypatch):
    monkeypatch.delenv(faults.DIR_ENV, raising=False)
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.due("engine") is None
    monkeypatch.setenv(faults.ENV, "engine:hang:1")
    with pytest.raises(RuntimeError, match=faults.DIR_ENV):
        faults.due("engine")


def test_the_watchdog_acts_on_a_call_past_its_deadline_and_a_heartbeat_defers_it():
    late = []
    watch = Watchdog(late.append, period_s=0.01)
    try:
        watch.start("beating", 0.3)
        watch.start("silent", 0.3)
        watch.start("answered", 0.3)
        watch.done("answered")
        for _ in range(10):  # 0.5 s of heartbeats, each well inside the deadline
            watch.beat("beating")
            time.sleep(0.05)
        assert late == ["silent"]
        deadline = time.monotonic() + 5
        while "beating" not in late and time.monotonic() < deadline:  # heartbeats stopped: its turn
            time.sleep(0.01)
        assert late == ["silent", "beating"]
    finally:
        watch.close()


def test_daemon_threads_report_the_stuck_call_and_let_go_of_it():
    release = threading.Event()
    pool = DaemonThreads(2, "t")
    stuck = pool.submit(release.wait, what="waiting forever")
    assert pool.submit(lambda: 7).result(timeout=5) == 7
    time.sleep(0.1)
    got = pool.stuck(0.05)
    assert got is not None and got[1] == "waiting forever" and got[0] > 0.05
    assert pool.stuck(60) is None
    assert pool.close(0.1) is False  # still running: close gives up instead of waiting forever
    assert pool._threads[0].daemon
    release.set()
    assert stuck.result(timeout=5) is True


def test_a_stuck_reward_thread_stops_the_next_submit_with_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(faults.ENV, "reward_thread:hang:2")
    task = Task(id="t-1", prompt="1+1?", verifier={"type": "numeric", "answer": "2"})
    workers = ThreadRewardWorkers(2, ctx=object(), timeout_s=0.2, grace_s=0.2)
    try:
        # one after the other: the fault counts calls as the threads reach it, so two in flight could swap
        assert workers.submit(task, "2").result(timeout=10).status == "scored"
        hung = workers.submit(task, "2")
        time.sleep(0.6)
        with pytest.raises(WorkerStuck) as stop:
            workers.submit(task, "2")
        assert not hung.done()
    finally:
        assert workers.close() is None  # returns although a thread is still stuck
    line = str(stop.value.at_step(4))
    assert line.startswith("reward worker thread stuck at step 4: scoring task t-1: no answer after")
    assert "\n" not in line


def test_a_reward_deadline_at_or_over_the_verdict_wait_is_refused():
    base = {
        "tasks": {"source": "builtin:arithmetic", "n": 4},
        "train": {"steps": 1},
        "scale": {"reward_deadline_s": 30},
        "grpo": {"verifier_timeout_s": 30},
    }
    with pytest.raises(ValueError, match="scale.reward_deadline_s .30. must be below grpo.verifier_timeout_s"):
        GRPOConfig.model_validate(base)
    assert GRPOConfig.model_validate({**base, "grpo": {"verifier_timeout_s": 31}}).grpo.hang_grace_s == 60
