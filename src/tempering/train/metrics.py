"""Per-step metrics: a JSONL file always, mirrored to the experiment trackers a run asks for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from tempering.train.trackers import open_trackers, record_scalars

console = Console(stderr=True)
quiet_console = Console(stderr=True, quiet=True)  # ranks other than 0 of a torchrun print nothing


class MetricsLog:
    """Appends one JSON object per record to `path`; mirrors its numbers to the trackers `loggers` names.

    `config` and `lineage` (run id, registry, input hashes) go to each tracker as the run's
    parameters and tags (train/trackers.py).
    """

    def __init__(
        self,
        path: Path,
        loggers: Sequence[str] = (),
        config: dict[str, Any] | None = None,
        lineage: dict[str, str] | None = None,
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._trackers = open_trackers(loggers, path.parent, config, lineage)
        self._fh = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        scalars = record_scalars(record)
        for tracker in self._trackers if scalars else ():
            tracker.log_metrics(scalars, int(record.get("step", 0)))

    def event(self, kind: str, **info: Any) -> None:
        """A discrete event (skip, rollback, resume) — logged and shown."""
        self.write({"event": kind, **info})
        console.print(f"[yellow]{kind}[/yellow] " + " ".join(f"{k}={v}" for k, v in info.items()))

    def close(self) -> None:
        self._fh.close()
        for tracker in self._trackers:
            tracker.close()


class NoMetrics:
    """The metrics log of a rank other than 0: only rank 0 writes (train/distributed.py)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        pass

    def event(self, kind: str, **info: Any) -> None:
        pass

    def close(self) -> None:
        pass


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
