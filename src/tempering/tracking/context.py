"""`RunContext`: what every writer of a run goes through: its dir, its rank, the event sink
(`metrics.jsonl` on rank 0) and the trackers that mirror every event.

The Trainer writes its step records and events through it; the held-out monitor its `eval`
events (the held-out measure's numbers: `eval_loss`, `heldout/<suite>/<metric>`) and the
measure its own (GRPO's `alarm`). `recipes.recipe.run_training` opens one per stage and
hands it to the Trainer; a Trainer built without one opens its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tempering.tracking.events import EventSink, read_events
from tempering.tracking.trackers import open_trackers


@dataclass
class RunContext:
    run_dir: Path
    rank: int
    sink: EventSink

    @classmethod
    def open(
        cls,
        run_dir: Path,
        rank: int = 0,
        loggers: Sequence[str] = (),
        config: dict[str, Any] | None = None,
        lineage: dict[str, str] | None = None,
    ) -> RunContext:
        """The context of the run in `run_dir`; on rank 0 the sink and the trackers `loggers` names
        (config and lineage go to them as parameters and tags); elsewhere nothing is opened.

        Raises:
            TrackerUnavailable: a tracker is unknown or its package is not installed.
        """
        run_dir = Path(run_dir)
        trackers = open_trackers(loggers, run_dir, config, lineage) if rank == 0 else []
        return cls(run_dir, rank, EventSink(run_dir, rank == 0, trackers))

    @property
    def main(self) -> bool:
        """Whether this process writes (rank 0)."""
        return self.rank == 0

    @property
    def metrics_path(self) -> Path:
        return self.sink.path

    def log(self, record: dict[str, Any]) -> None:
        """A step's figures (`step` plus numbers)."""
        self.sink.write(record)

    def event(self, kind: str, /, show: bool = True, **info: Any) -> None:
        """An event (`step` and its figures): written, mirrored, and shown unless `show` is False."""
        self.sink.event(kind, show, **info)

    def events(self, kind: str) -> list[dict[str, Any]]:
        """The events of `kind` written so far (by this process or one killed before it)."""
        return read_events(self.metrics_path, kind)

    def close(self) -> None:
        self.sink.close()

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
