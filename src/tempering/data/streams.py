"""Stream rows in and out with bounded memory: Parquet by record batch, JSONL by line, and an
atomic JSONL writer that checksums what it writes.

`stream_rows` is `data.io.iter_rows` except that Parquet is read one record batch at a time
(never the whole table). `AtomicJsonl` writes to `<out>.tmp`, hashes the bytes as they go,
and only on success flushes them to disk, moves the file into place and writes
`<out>.sha256` next to it (the `sha256sum` format, so `sha256sum -c` checks it): a crash or
a bad input leaves no half-written output. `write_jsonl_atomic` is the same for an iterable.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Iterator

from tempering.data.io import iter_rows

PARQUET_BATCH = 4096


def stream_rows(path: str | Path) -> Iterator[tuple[str, Any, Exception | None]]:
    """(location, row, parse error) for each row of a data file, reading Parquet by batch."""
    path = Path(path)
    if path.suffix != ".parquet" or not path.is_file():
        yield from iter_rows(path)
        return
    import pyarrow.parquet as pq

    i = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH):
        for row in batch.to_pylist():
            i += 1
            yield f"row {i}", row, None


def require_jsonl(path: str | Path) -> Path:
    """`path` when it names a JSON Lines file; a ValueError for the user otherwise."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".ndjson"):
        raise ValueError(f"{path}: output must be .jsonl")
    return path


def where(path: str | Path, location: str) -> str:
    """`path:N` for a location such as "line 7" or "row 7"."""
    return f"{path}:{location.split()[-1]}"


class AtomicJsonl:
    """Write JSONL rows to `path` atomically, with a sha256 of the file's bytes.

    with AtomicJsonl(out) as writer:
        writer.write(row)
    writer.sha256, writer.rows
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.rows = 0
        self.sha256: str | None = None
        self._hash = hashlib.sha256()
        self._fh: Any = None

    def __enter__(self) -> AtomicJsonl:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.tmp.open("wb")
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
        if exc_type is None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        self._fh.close()
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)
            return
        self.sha256 = self._hash.hexdigest()
        self.tmp.replace(self.path)
        checksum = self.path.with_name(self.path.name + ".sha256")
        checksum.write_text(f"{self.sha256}  {self.path.name}\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any]) -> tuple[int, str]:
    """Write `rows` as JSON Lines to `path` atomically; returns (rows written, sha256 hex)."""
    with AtomicJsonl(path) as writer:
        for row in rows:
            writer.write(row)
    return writer.rows, writer.sha256
