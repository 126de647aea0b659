"""`threads: auto` takes the cores free now; an int is used as given; every shipped example leaves it to auto."""

import math
from pathlib import Path

import pytest
import torch
import yaml

from tempering.config import EvalConfig, TrainSettings
from tempering.models import threads as threads_mod
from tempering.models.threads import auto_threads, choose_threads, set_threads

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "cpus, load, want",
    [
        (2, 0.0, 2),  # an idle 2-core host: both
        (2, 1.0, 1),  # one core busy
        (2, 1.6, 1),  # 0.4 free rounds to 0: still at least one
        (2, 7.3, 1),  # oversubscribed: one thread, never 0 or negative
        (16, 3.4, 13),  # 12.6 free rounds to 13
        (16, 3.5, 12),  # 12.5: Python rounds half to even
        (1, 0.0, 1),
    ],
)
def test_auto_takes_the_free_cores(cpus, load, want):
    assert auto_threads(cpus, load) == want


def test_the_default_is_auto_and_says_why(monkeypatch):
    assert TrainSettings(steps=1).threads == "auto" and EvalConfig(out="o", suites=["x"]).threads == "auto"
    monkeypatch.setattr(threads_mod.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(threads_mod.os, "getloadavg", lambda: (1.2, 0.5, 0.1))
    monkeypatch.setattr(threads_mod, "_own_load_now", lambda: 0.0)
    assert choose_threads("auto") == (3, "auto: 4 usable cores - load average 1.20 (this process's 0.00)")


def test_auto_does_not_count_this_processs_own_load(monkeypatch):
    """A pipeline's next stage on an idle 2-core host: the load average of 1.8 is this process's
    own previous stage (2 cores busy for minutes), so both cores are free."""
    monkeypatch.setattr(threads_mod.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads_mod.os, "getloadavg", lambda: (1.8, 1.5, 0.9))
    monkeypatch.setattr(threads_mod, "_own_load_now", lambda: threads_mod.own_load(cpu_s=600.0, age_s=300.0))
    assert choose_threads("auto")[0] == 2
    monkeypatch.setattr(threads_mod, "_own_load_now", lambda: threads_mod.own_load(cpu_s=2.0, age_s=3.0))
    assert choose_threads("auto")[0] == 1  # a fresh process: the 1.8 is someone else's


def test_own_load_by_hand():
    assert threads_mod.own_load(120.0, 60.0) == pytest.approx(2 * (1 - math.exp(-1)))  # 2 cores for a minute: 1.26
    assert threads_mod.own_load(6000.0, 3000.0) == pytest.approx(2.0, abs=1e-9)  # long enough: its mean use
    assert threads_mod.own_load(1.0, 0.0) == 0.0


def test_own_load_reads_this_process():
    assert 0.0 <= threads_mod._own_load_now() <= len(threads_mod.os.sched_getaffinity(0)) + 1
    assert choose_threads(2) == (2, "set in the config") and choose_threads(None) == (None, "torch's default")


def test_set_threads_sets_torch_and_logs_a_count_once(monkeypatch):
    monkeypatch.setattr(threads_mod, "_told", set())
    before, lines = torch.get_num_threads(), []
    try:
        assert set_threads(1, lines.append) == 1 and torch.get_num_threads() == 1
        set_threads(1, lines.append)  # a stage, then its trainer: one line
        assert lines == ["threads: 1 (set in the config)"]
        assert set_threads(None, lines.append) is None and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def threads_keys(node, where=""):
    """Dotted keys named `threads` anywhere in a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "threads":
                yield f"{where}{key}"
            yield from threads_keys(value, f"{where}{key}.")
    elif isinstance(node, list):
        for item in node:
            yield from threads_keys(item, where)


def test_no_shipped_example_pins_threads():
    pinned = [
        f"{path.relative_to(ROOT)}: {key}"
        for path in sorted((ROOT / "examples").rglob("*.yaml"))
        for key in threads_keys(yaml.safe_load(path.read_text()))
    ]
    assert pinned == []
