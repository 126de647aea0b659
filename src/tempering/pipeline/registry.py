"""The run registry: every run's config, input hashes, base model, outputs and metrics.

SQLite file in the run root by default (`runs/registry.sqlite`). The schema is versioned
in `schema_version`; opening a newer-schema database with older code is an error, an
older one is migrated forward.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from tempering.hashing import sha256_file as file_sha256

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,             -- running | finished | failed
    base_model TEXT,
    config TEXT NOT NULL,             -- JSON
    inputs TEXT NOT NULL,             -- JSON {path: sha256}
    outputs TEXT NOT NULL DEFAULT '{}',
    metrics TEXT NOT NULL DEFAULT '{}',
    error TEXT,
    started_at REAL NOT NULL,
    finished_at REAL
);
"""


class Registry:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.row_factory = sqlite3.Row
        self._migrate()

    def _migrate(self) -> None:
        with self.db:
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                self.db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            elif row["version"] > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: registry schema v{row['version']} is newer than this Tempering (v{SCHEMA_VERSION})"
                )

    def start(self, name: str, kind: str, config: dict, inputs: list[str], base_model: str | None) -> str:
        run_id = uuid.uuid4().hex[:12]
        hashes = {str(p): file_sha256(p) for p in inputs}
        with self.db:
            self.db.execute(
                "INSERT INTO runs (id, name, kind, status, base_model, config, inputs, started_at) "
                "VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, name, kind, base_model, json.dumps(config), json.dumps(hashes), time.time()),
            )
        return run_id

    def finish(self, run_id: str, outputs: dict, metrics: dict) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET status='finished', outputs=?, metrics=?, finished_at=? WHERE id=?",
                (json.dumps(outputs), json.dumps(metrics), time.time(), run_id),
            )

    def fail(self, run_id: str, error: str) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET status='failed', error=?, finished_at=? WHERE id=?", (error, time.time(), run_id)
            )

    def get(self, run_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM runs WHERE id=? OR name=? ORDER BY started_at DESC", (run_id, run_id)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id!r} in {self.path}")
        return _decode(row)

    def list(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC LIMIT ?", (limit,)).fetchall()
        return [_decode(r) for r in rows]

    def close(self) -> None:
        self.db.close()


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("config", "inputs", "outputs", "metrics"):
        out[key] = json.loads(out[key])
    return out
