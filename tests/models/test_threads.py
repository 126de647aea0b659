"""`threads: auto` takes the cores free now; an int is used as given; every shipped example leaves it to auto."""

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
    assert choose_threads("auto") == (3, "auto: 4 usable cores - load average 1.20")
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
