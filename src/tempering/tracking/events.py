"""A run's `metrics.jsonl`: one JSON object per step record and per event, written here only.

`EventSink` is the one writer (rank 0's; every other rank's writes nothing) and mirrors each
record's numbers to the run's trackers; `read_metrics` / `read_events` are the one parser.
A record is a step's figures (`step`, `loss`, ...); an event carries `"event": KIND` (`skip`,
`rollback`, `resume`, `eval`, `alarm`, ...).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from tempering.tracking.trackers import Tracker, record_scalars

METRICS_FILE = "metrics.jsonl"
console = Console(stderr=True)


def metrics_path(run_dir: Path | str) -> Path:
    """Where a run's event stream lives."""
    return Path(run_dir) / METRICS_FILE


class EventSink:
    """Appends each record to `metrics.jsonl` and hands its numbers to every tracker.

    `main`: False on the ranks other than 0 of a torchrun, which write nothing and open no file.
    """

    def __init__(self, run_dir: Path, main: bool = True, trackers: Sequence[Tracker] = ()):
        self.path = metrics_path(run_dir)
        self.main = main
        self.trackers = list(trackers)
        self._fh = None
        if main:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        """One record (a step's figures, or an event), stamped with the time."""
        if self._fh is None:
            return
        record = {"time": round(time.time(), 3), **record}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        scalars = record_scalars(record)
        for tracker in self.trackers if scalars else ():
            tracker.log_metrics(scalars, int(record.get("step", 0)))

    def event(self, kind: str, /, show: bool = True, **info: Any) -> None:
        """A discrete event (skip, rollback, resume, eval, alarm): written, and shown unless `show` is False."""
        if self._fh is None:
            return
        self.write({"event": kind, **info})
        if show:
            console.print(f"[yellow]{kind}[/yellow] " + " ".join(f"{k}={v}" for k, v in info.items()))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a `metrics.jsonl`, in order; a last line cut short by a kill is left out."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return records


def read_events(path: Path, kind: str) -> list[dict[str, Any]]:
    """The events of one kind (`eval`, `alarm`, ...) of a `metrics.jsonl`, in order."""
    return [r for r in read_metrics(path) if r.get("event") == kind]
