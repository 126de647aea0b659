"""Atomic file writes: the one place a file is written whole or not at all.

Contract of every writer here: the bytes go to a temp file in the target's directory
(a unique hidden name, so two writers never share one), are flushed and fsynced, and the
temp file is renamed over the target (`os.replace`, atomic on POSIX within one
filesystem). A reader sees the old file or the new one, never half of one; a crash or an
exception leaves the target as it was and removes the temp file. Parent directories are
created. (Checkpoint and converted-model *directories* are published the same way, by
rename: `train.checkpoint` for checkpoints, `publish_dir` here for converted models; their files
are fsynced with `fsync_file`.)

JSON Lines are written by `AtomicJsonl` / `write_jsonl_atomic`, which also hash the bytes
as they go: the sha256 is always returned, and with `sidecar=True` it is also written to
`<out>.sha256` next to the file (the `sha256sum` format, so `sha256sum -c` checks it) after
the rename, for data files whose consumers verify them; caches and run records pass
`sidecar=False`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Iterator


def _temp_beside(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def fsync_file(path: str | Path) -> None:
    """Flush a written file's bytes to disk (before a rename makes it visible)."""
    with Path(path).open("rb") as fh:
        os.fsync(fh.fileno())


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temp path to write `path`'s content to (by any writer: parquet, torch.save);
    on a clean exit it is fsynced and renamed over `path`, on an exception removed."""
    path = Path(path)
    tmp = _temp_beside(path)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically; returns `path`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns `path`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


class AtomicJsonl:
    """Write JSONL rows (UTF-8, one `json.dumps` per line) to `path` atomically, hashing the bytes.

    with AtomicJsonl(out, sidecar=True) as writer:
        writer.write(row)
    writer.sha256, writer.rows
    """

    def __init__(self, path: str | Path, *, sidecar: bool):
        self.path = Path(path)
        self.sidecar = sidecar
        self.rows = 0
        self.sha256: str | None = None
        self._hash = hashlib.sha256()
        self._fh: Any = None
        self._tmp: Path | None = None

    def __enter__(self) -> AtomicJsonl:
        self._tmp = _temp_beside(self.path)
        self._fh = self._tmp.open("wb")
        return self

    def write(self, row: Any) -> None:
        """Append one row (as one JSON line)."""
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        self._hash.update(line)
        self._fh.write(line)
        self.rows += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tmp is not None
        try:
            if exc_type is None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
            self._fh.close()
            if exc_type is not None:
                return
            self.sha256 = self._hash.hexdigest()
            os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)
        if self.sidecar:
            write_text_atomic(self.path.with_name(self.path.name + ".sha256"), f"{self.sha256}  {self.path.name}\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any], *, sidecar: bool) -> tuple[int, str]:
    """Write `rows` as JSON Lines to `path` atomically; returns (rows written, sha256 hex of the bytes).

    `sidecar`: also write `<path>.sha256` (see the module docstring).
    """
    with AtomicJsonl(path, sidecar=sidecar) as writer:
        for row in rows:
            writer.write(row)
    assert writer.sha256 is not None
    return writer.rows, writer.sha256


@contextmanager
def publish_dir(out: Path) -> Iterator[Path]:
    """A temp dir beside `out`, renamed to `out` when the block succeeds (removed when it fails).

    A converted model appears whole or not at all; when another process published `out`
    first, theirs is kept (it is as good as ours)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.rename(tmp, out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
