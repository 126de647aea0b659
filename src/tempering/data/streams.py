"""Stream rows in with bounded memory: Parquet by record batch, JSONL by line.

`stream_rows` is `data.io.iter_rows` except that Parquet is read one record batch at a time
(never the whole table). Rows go out through `tempering.atomic` (`AtomicJsonl`,
`write_jsonl_atomic`): a crash or a bad input leaves no half-written output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from tempering.data.io import iter_rows, where
from tempering.errors import UserError

__all__ = ["stream_rows", "require_jsonl", "where"]  # `where` re-exported: callers import it from here

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
        raise UserError(f"{path}: output must be .jsonl")
    return path
