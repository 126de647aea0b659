"""Atomic JSONL output with a checksum: a reader never sees half a file.

Rows are written to a temporary file beside the target, flushed to disk, then renamed over
it; the sha256 of the bytes written is returned and stored next to the file as
`<name>.sha256` (the `sha256sum` format, so `sha256sum -c` checks it).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any]) -> tuple[int, str]:
    """Write `rows` as JSON Lines to `path` atomically; returns (rows written, sha256 hex)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    n = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for row in rows:
                line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
                h.update(line)
                fh.write(line)
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    digest = h.hexdigest()
    Path(f"{path}.sha256").write_text(f"{digest}  {path.name}\n")
    return n, digest
