"""The run registry: every run's config, inputs with their roles, outputs and metrics.

SQLite file in the run root by default (`runs/registry.sqlite`). The schema is versioned
in `schema_version`; opening a newer-schema database with older code is an error, an
older one is migrated forward (v1 -> v2 below).

Lineage is data. Each input of a run is a row `(role, path, sha256, parent_run)`: the
role says what the stage did with it (`train`, `replay`, `tasks` are trained on; `eval`,
`heldout` are only measured; `base_model` is the starting weights), and `parent_run` links
an input that is itself a run's output (a checkpoint, an export, a merge) to that run. So
"which files, in which roles, trained this checkpoint?" is one recursive query
(`Registry.lineage`), and a new recipe only declares its inputs' roles.

Outputs. Every output dir (a run's `final/`, an export) is recorded with its run and gets
a small marker file, `tempering-run.json`, naming its registry and run id: a model path
found anywhere leads back to its run without guessing from where it sits on disk.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tempering.hashing import sha256_file as file_sha256

SCHEMA_VERSION = 2
MARKER = "tempering-run.json"
ROLES = ("train", "replay", "tasks", "eval", "heldout", "base_model")
TRAINING_ROLES = frozenset({"train", "replay", "tasks"})
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,             -- running | finished | failed
    base_model TEXT,
    config TEXT NOT NULL,             -- JSON
    inputs TEXT NOT NULL,             -- JSON {path: sha256} (a summary; the rows are in run_inputs)
    outputs TEXT NOT NULL DEFAULT '{}',
    metrics TEXT NOT NULL DEFAULT '{}',
    error TEXT,
    started_at REAL NOT NULL,
    finished_at REAL
);
"""
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS run_inputs (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    role TEXT NOT NULL,               -- one of ROLES
    path TEXT NOT NULL,               -- as given (relative to where the run started)
    sha256 TEXT,                      -- files only
    parent_run TEXT                   -- the run whose output this input is, if any
);
CREATE TABLE IF NOT EXISTS run_outputs (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    role TEXT NOT NULL,               -- final | merged | metrics | ...
    path TEXT NOT NULL                -- absolute
);
CREATE INDEX IF NOT EXISTS run_inputs_run ON run_inputs(run_id);
CREATE INDEX IF NOT EXISTS run_outputs_path ON run_outputs(path);
"""
# The lineage walk: the run, then (recursively) the runs whose outputs were its base model.
_LINEAGE = """
WITH RECURSIVE chain(run_id, depth) AS (
    SELECT ?, 0
    UNION
    SELECT i.parent_run, c.depth + 1 FROM run_inputs i JOIN chain c ON i.run_id = c.run_id
    WHERE i.role = 'base_model' AND i.parent_run IS NOT NULL
)
SELECT c.depth, r.id AS run_id, r.name, r.kind, i.role, i.path, i.sha256, i.parent_run
FROM chain c JOIN runs r ON r.id = c.run_id LEFT JOIN run_inputs i ON i.run_id = c.run_id
ORDER BY c.depth, i.rowid
"""


class RegistryError(RuntimeError):
    """A registry file that this code cannot use."""


@dataclass(frozen=True)
class Input:
    """One input of a run and what the run did with it."""

    path: str
    role: str
    sha256: str | None = None
    parent_run: str | None = None


@dataclass(frozen=True)
class LineageRow:
    """One input of one run in a checkpoint's lineage (depth 0 = the run that wrote it)."""

    depth: int
    run_id: str
    run_name: str
    kind: str
    role: str | None
    path: str | None
    sha256: str | None
    parent_run: str | None


def describe_input(path: str | Path, role: str) -> Input:
    """An `Input` with its content hash (files) and its parent run (dirs carrying a marker)."""
    if role not in ROLES:
        raise ValueError(f"unknown input role {role!r}; one of {', '.join(ROLES)}")
    p = Path(path).expanduser()
    marker = read_marker(p)
    # Files and data dirs (a saved `datasets` dir) are hashed; model dirs are named by their
    # path or their marker's run (hashing one would read hundreds of MB at every start).
    data_dir = p.is_dir() and marker is None and role != "base_model"
    sha = file_sha256(p) if p.is_file() or data_dir else None
    return Input(str(path), role, sha, marker["run_id"] if marker else None)


def read_marker(path: str | Path) -> dict[str, Any] | None:
    """The `{registry, run_id, run}` marker of an output dir, or None."""
    marker = Path(path).expanduser() / MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text())
    except (json.JSONDecodeError, OSError):
        return None


class Registry:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.row_factory = sqlite3.Row
        self._migrate()

    def _migrate(self) -> None:
        with self.db:
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT version FROM schema_version").fetchone()
            version = SCHEMA_VERSION if row is None else row["version"]
            if version > SCHEMA_VERSION:
                raise RegistryError(
                    f"{self.path}: registry schema v{version} is newer than this Tempering (v{SCHEMA_VERSION}); "
                    "upgrade Tempering to read it")
            self.db.executescript(_SCHEMA_V2)
            if row is None:
                self.db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            elif version < 2:
                from tempering.pipeline.migrate import v1_to_v2

                v1_to_v2(self.db, self.path)
                self.db.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION,))

    # ------------------------------------------------------------------ writing
    def start(self, name: str, kind: str, config: dict, inputs: Sequence[Input], base_model: str | None) -> str:
        """Record a run as running; `base_model` becomes a `base_model` input too."""
        run_id = uuid.uuid4().hex[:12]
        rows = list(inputs)
        if base_model and not any(i.role == "base_model" and i.path == base_model for i in rows):
            rows.append(describe_input(base_model, "base_model"))
        summary = {i.path: i.sha256 for i in rows if i.sha256}
        with self.db:
            self.db.execute(
                "INSERT INTO runs (id, name, kind, status, base_model, config, inputs, started_at) "
                "VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, name, kind, base_model, json.dumps(config), json.dumps(summary), time.time()),
            )
            self.db.executemany("INSERT INTO run_inputs VALUES (?, ?, ?, ?, ?)",
                                [(run_id, i.role, i.path, i.sha256, i.parent_run) for i in rows])
        return run_id

    def record_output(self, run_id: str, role: str, path: str | Path) -> None:
        """Link an output dir to its run: a registry row plus the marker file inside it."""
        path = Path(path).expanduser().resolve()
        run = self.get(run_id)
        with self.db:
            self.db.execute("INSERT INTO run_outputs VALUES (?, ?, ?)", (run_id, role, str(path)))
        if path.is_dir():
            marker = {"registry": str(self.path.resolve()), "run_id": run_id, "run": run["name"], "role": role}
            (path / MARKER).write_text(json.dumps(marker, indent=1) + "\n")

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

    def remove(self, run_ids: Sequence[str]) -> int:
        """Delete runs (and their input/output rows); returns how many went."""
        with self.db:
            for table in ("run_inputs", "run_outputs"):
                self.db.executemany(f"DELETE FROM {table} WHERE run_id=?", [(r,) for r in run_ids])
            cur = self.db.executemany("DELETE FROM runs WHERE id=?", [(r,) for r in run_ids])
        return cur.rowcount if cur.rowcount >= 0 else len(run_ids)

    # ------------------------------------------------------------------ reading
    def get(self, run_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM runs WHERE id=? OR name=? ORDER BY started_at DESC", (run_id, run_id)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id!r} in {self.path}")
        return _decode(row)

    def latest(self, name: str) -> dict[str, Any] | None:
        """The newest run recorded under `name`, or None."""
        try:
            return self.get(name)
        except KeyError:
            return None

    def inputs(self, run_id: str) -> list[Input]:
        rows = self.db.execute("SELECT role, path, sha256, parent_run FROM run_inputs WHERE run_id=? ORDER BY rowid",
                               (run_id,)).fetchall()
        return [Input(r["path"], r["role"], r["sha256"], r["parent_run"]) for r in rows]

    def run_for_output(self, path: str | Path) -> dict[str, Any] | None:
        """The run that wrote output dir `path`, or None."""
        row = self.db.execute("SELECT run_id FROM run_outputs WHERE path=? ORDER BY rowid DESC LIMIT 1",
                              (str(Path(path).expanduser().resolve()),)).fetchone()
        return self.get(row["run_id"]) if row else None

    def lineage(self, run_id: str) -> list[LineageRow]:
        """Every input, with its role, of the run and of the runs its base model came from (one query)."""
        return [LineageRow(r["depth"], r["run_id"], r["name"], r["kind"], r["role"], r["path"], r["sha256"],
                           r["parent_run"]) for r in self.db.execute(_LINEAGE, (run_id,)).fetchall()]

    def list(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC LIMIT ?", (limit,)).fetchall()
        return [_decode(r) for r in rows]

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("config", "inputs", "outputs", "metrics"):
        out[key] = json.loads(out[key])
    return out
