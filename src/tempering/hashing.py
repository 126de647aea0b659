"""Content hashes for files (checkpoint manifests, run inputs). No torch import."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks; for a directory (a saved
    Hugging Face dataset), of its files' relative paths and bytes in sorted order."""
    h = hashlib.sha256()
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if file != path:
            h.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
