"""The run's record of which data each optimizer step consumed: `<run>/consumed.jsonl`.

One line per step the trainer attempted, applied or skipped by the guard:
`{"step": 3, "ids": [17, 4, ...]}` (`"skipped": "nan"` when the guard dropped it). `ids` are
what the batch source drew from its data order for that step, in order: row indices of the
valid training rows (SFT, preference and reward pairs; under torchrun the global micro-batch,
not one rank's share) or task ids (GRPO; an empty list for the later updates of a batch served
`updates_per_batch` times).

Kept consistent with the checkpoints: the log is flushed and fsynced before a checkpoint is
written, the checkpoint records how many lines it covers, and a resume cuts the log back to
that many (a line written after the newest checkpoint belongs to a step the resumed run does
again). So after any kill and resume the log reads as one unbroken run: an id skipped or
drawn twice by a resume shows in it. It is not a cache: nothing reads it to decide what to
train on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tempering.atomic import fsync_file, write_text_atomic


class ConsumedLog:
    """Append-only per-step record of consumed ids (rank 0 writes; the other ranks pass `path=None`)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.count = 0
        self._fh = None

    def start(self, keep: int | None) -> int:
        """Open for appending after the first `keep` lines (0 for a new run; the resumed checkpoint's
        count on a resume; None for a checkpoint older than the record: keep it all). Returns how
        many lines were dropped.

        Raises:
            RuntimeError: the log holds fewer lines than the checkpoint counts (edited or lost).
        """
        if self.path is None:
            self.count = keep or 0
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True) if self.path.exists() else []
        keep = len(read_consumed(self.path)) if keep is None and lines else keep or 0
        if len(lines) < keep:
            raise RuntimeError(
                f"{self.path} holds {len(lines)} steps but the checkpoint counts {keep}: the record was "
                "edited or lost after the checkpoint; start a new run with another --name"
            )
        if len(lines) != keep:  # a kill after the checkpoint: those steps are done again
            write_text_atomic(self.path, "".join(lines[:keep]))
        self.count = keep
        self._fh = self.path.open("a", encoding="utf-8")
        return len(lines) - keep

    def adopt(self, source: Path, keep: int | None) -> None:
        """Begin this log with the first `keep` lines of another run's (a run resumed from that
        run's checkpoint continues its record; all of it for a checkpoint older than the record)."""
        if self.path is None or not source.is_file():
            return
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        write_text_atomic(self.path, "".join(lines if keep is None else lines[:keep]))

    def append(self, step: int, ids: list[Any], skipped: str | None = None) -> None:
        self.count += 1
        if self._fh is None:
            return
        line: dict[str, Any] = {"step": step, "ids": ids}
        if skipped:
            line["skipped"] = skipped
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()

    def sync(self) -> None:
        """Make every line so far durable (called before a checkpoint that counts them)."""
        if self._fh is not None and self.path is not None:
            self._fh.flush()
            fsync_file(self.path)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_consumed(path: Path) -> list[dict[str, Any]]:
    """The log's lines, in order (a final line torn by a kill mid-write is not a step: dropped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out
