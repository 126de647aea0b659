"""The run registry: every run's config, inputs with their roles, outputs, evals and releases.

Where it lives. An SQLite file in the run root by default (`runs/registry.sqlite`); a
PostgreSQL server when given a URL (`postgresql+psycopg://user@host/db`), for a team
sharing one registry. Both go through the same SQLAlchemy Core code. `Registry.open(where)`
picks: a URL as given, else the `TEMPERING_REGISTRY` environment variable if set, else the
SQLite file in the run root `where`. The schema is versioned in `schema_version`; opening a
newer-schema database with older code is an error, an older SQLite file is migrated forward
(runs/migrate.py). Writes are transactions: on SQLite each takes the write lock at its
start (`BEGIN IMMEDIATE`, waiting up to 30 s), on PostgreSQL rows never collide, so two
processes writing at once lose nothing.

Lineage is data. Each input of a run is a row `(role, path, sha256, parent_run)`: the
role says what the stage did with it (`train`, `replay`, `tasks` are trained on; `eval`,
`heldout` are only measured; `base_model` is the starting weights), and `parent_run` links
an input that is itself a run's output dir (a checkpoint, an export, a merge) to that run.
Outputs carry content hashes too, so a data file written by one run (a dedup's kept rows,
a decontaminated set, a mix) and read by a later one links the two by its bytes, wherever
the file was copied. "Which files, in which roles, and which data passes led to this
checkpoint?" is one recursive query (`Registry.lineage`).

Outputs. Every output dir (a run's `final/`, an export) is recorded with its run and gets
a small marker file, `tempering-run.json`, naming its registry and run id: a model path
found anywhere leads back to its run without guessing from where it sits on disk.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from tempering.atomic import write_text_atomic
from tempering.errors import InputNotFound, UserError
from tempering.hashing import sha256_file as file_sha256
from tempering.runs import REGISTRY_ENV, REGISTRY_FILE, migrate, project_registry, schema
from tempering.runs.schema import SCHEMA_VERSION, metadata, run_inputs, run_outputs, runs, schema_version

__all__ = [
    "SCHEMA_VERSION",
    "Registry",
    "RegistryError",
    "Input",
    "LineageRow",
    "describe_input",
    "read_marker",
    "model_dir",
    "model_marker",
    "registry_exists",
    "file_sha256",
    "REGISTRY_ENV",
    "REGISTRY_FILE",
]

MARKER = "tempering-run.json"
# failures: eval samples a feedback stage mined (never trained on); feedback / votes: served bad
# cases and arena votes that become training data; pool: the tasks mined from.
ROLES = (
    "train",
    "replay",
    "tasks",
    "eval",
    "heldout",
    "base_model",
    "failures",
    "feedback",
    "votes",
    "pool",
    "chat_template",
)
TRAINING_ROLES = frozenset({"train", "replay", "tasks", "feedback", "votes", "pool"})
# Output roles that are model checkpoints: their dirs are hashed (without the marker).
CHECKPOINT_ROLES = frozenset({"final", "best", "merged"})
_PG_LOCK = 7_246_315  # advisory lock key serialising schema creation and alias moves on PostgreSQL

# The run that produced an input: its marker's run, else the newest earlier run that wrote
# the same bytes (a dedup's kept rows, a mix). "Earlier" keeps the walk acyclic.
_PARENT = """COALESCE(i.parent_run, (
    SELECT o.run_id FROM run_outputs o JOIN runs p ON p.id = o.run_id
    WHERE o.sha256 = i.sha256 AND o.run_id <> i.run_id
      AND p.started_at < (SELECT c0.started_at FROM runs c0 WHERE c0.id = i.run_id)
    ORDER BY p.started_at DESC, o.id DESC LIMIT 1))"""
_LINEAGE = sa.text(f"""
WITH RECURSIVE chain(run_id, depth) AS (
    SELECT CAST(:run_id AS VARCHAR(32)), 0
    UNION
    SELECT {_PARENT}, c.depth + 1 FROM run_inputs i JOIN chain c ON i.run_id = c.run_id
    WHERE {_PARENT} IS NOT NULL AND c.depth < 64
), first_seen AS (SELECT run_id, MIN(depth) AS depth FROM chain GROUP BY run_id)
SELECT f.depth, r.id AS run_id, r.name, r.kind, i.role, i.path, i.sha256, {_PARENT} AS parent_run
FROM first_seen f JOIN runs r ON r.id = f.run_id LEFT JOIN run_inputs i ON i.run_id = f.run_id
ORDER BY f.depth, r.started_at, i.id
""")


class RegistryError(UserError, RuntimeError):
    """A registry that this code cannot open or use; the message is one line."""


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
    marker = model_marker(path) if role == "base_model" else read_marker(p)
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


def model_dir(spec: str | Path) -> Path:
    """The directory a model spec names on this disk, so every spelling of one model is one
    recorded output: `RUN@best` is `RUN/best`, `RUN@latest` and `RUN@step-40` (or `step-00000040`)
    the checkpoint dir (`models.checkpoints.checkpoint_path`); anything else the path as given.

    Raises:
        CheckpointError: `RUN@...` names a run dir or checkpoint that is not there (one line).
    """
    from tempering.models.checkpoints import checkpoint_path

    found = checkpoint_path(str(spec))
    return found if found is not None else Path(spec).expanduser()


def model_marker(spec: str | Path) -> dict[str, Any] | None:
    """The marker of the run that wrote model `spec` (any spelling, `model_dir`): its dir's, or
    for a checkpoint `<run>/checkpoints/step-N` its run dir's. Nothing is guessed from other parents."""
    path = model_dir(spec)
    marker = read_marker(path)
    if marker is None and path.parent.name == "checkpoints":
        marker = read_marker(path.parent.parent)
    return marker


def is_url(location: str | Path) -> bool:
    return "://" in str(location)


def registry_exists(location: str | Path) -> bool:
    """Whether a marker's registry can be opened: a server URL, or an SQLite file that exists."""
    return is_url(location) or Path(location).expanduser().is_file()


def content_hash(path: str | Path, role: str) -> str | None:
    """The sha256 an output is recorded with: files always, checkpoint dirs without the marker."""
    p = Path(path)
    if p.is_file():
        return file_sha256(p)
    if p.is_dir() and role in CHECKPOINT_ROLES:
        return file_sha256(p, exclude={MARKER})
    return None


class Registry:
    """The registry at `location`: an SQLite file path or an SQLAlchemy database URL."""

    def __init__(self, location: str | Path):
        self.path: Path | None = None
        if is_url(location):
            url = sa.make_url(str(location))
            if url.get_backend_name() == "sqlite" and url.database:
                self.path = Path(url.database)
        else:
            self.path = Path(location).expanduser()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            url = sa.make_url(f"sqlite:///{self.path.resolve()}")
        # What a marker names: the SQLite file, or the URL without its password (psycopg takes
        # it from PGPASSWORD or ~/.pgpass), so no secret is written next to a model.
        self.location = str(self.path.resolve()) if self.path else _without_password(url)
        try:
            self.engine = _engine(url)
        except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError) as exc:
            raise RegistryError(f"{self.location}: cannot open the registry: {exc}") from None
        try:
            self._migrate()
        except sa_exc.OperationalError as exc:
            self.engine.dispose()
            why = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise RegistryError(f"{self.location}: cannot open the registry: {why}") from None
        except BaseException:
            self.engine.dispose()
            raise

    @classmethod
    def open(cls, where: str | Path | None = None) -> Registry:
        """The registry for `where`: a URL as given; else `$TEMPERING_REGISTRY` if set; else the
        project's registry (a `.tempering/` dir at or above the working directory, `temper init`);
        else the SQLite file `where/registry.sqlite` (`where` defaults to `runs`; a file path is
        used as is). So every run, pipeline stage and command of a project shares one registry."""
        if where is not None and is_url(where):
            return cls(where)
        if os.environ.get(REGISTRY_ENV):
            return cls(os.environ[REGISTRY_ENV])
        found = project_registry()
        if found is not None:
            return cls(found)
        path = Path(where if where is not None else "runs")
        return cls(path if path.is_file() or path.suffix in (".sqlite", ".db") else path / REGISTRY_FILE)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """One write transaction: everything inside commits together or not at all."""
        with self.engine.begin() as conn:
            yield conn

    def lock(self, conn: sa.Connection) -> None:
        """Serialise read-modify-write sections (alias moves) across processes.

        SQLite already holds the database's write lock for the whole transaction."""
        if self.dialect == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})

    @contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        """A connection for reads (on SQLite a deferred transaction: readers never take the write lock)."""
        with self.engine.connect().execution_options(registry_read=True) as conn:
            yield conn

    def _migrate(self) -> None:
        with self.transaction() as conn:
            self.lock(conn)
            have = sa.inspect(conn).has_table("schema_version")
            row = conn.execute(sa.select(schema_version.c.version)).first() if have else None
            version = SCHEMA_VERSION if row is None else row.version
            if version > SCHEMA_VERSION:
                raise RegistryError(
                    f"{self.location}: registry schema v{version} is newer than this Tempering (v{SCHEMA_VERSION}); "
                    "upgrade Tempering to read it"
                )
            if version == 2:
                migrate.v2_to_v3(conn)
            metadata.create_all(conn)
            if row is None:
                conn.execute(sa.insert(schema_version).values(version=SCHEMA_VERSION))
            elif version < SCHEMA_VERSION:
                if version == 1:
                    migrate.v1_to_v2(conn, self.path or Path(self.location))
                if version == 2:
                    migrate.copy_v2_rows(conn)
                conn.execute(sa.update(schema_version).values(version=SCHEMA_VERSION))

    # ------------------------------------------------------------------ writing
    def start(self, name: str, kind: str, config: dict, inputs: Sequence[Input], base_model: str | None) -> str:
        """Record a run as running; `base_model` becomes a `base_model` input too."""
        run_id = uuid.uuid4().hex[:12]
        rows = list(inputs)
        if base_model and not any(i.role == "base_model" and i.path == base_model for i in rows):
            rows.append(describe_input(base_model, "base_model"))
        summary = {i.path: i.sha256 for i in rows if i.sha256}
        with self.transaction() as conn:
            conn.execute(
                sa.insert(runs).values(
                    id=run_id,
                    name=name,
                    kind=kind,
                    status="running",
                    base_model=base_model,
                    config=json.dumps(config),
                    inputs=json.dumps(summary),
                    outputs="{}",
                    metrics="{}",
                    started_at=time.time(),
                )
            )
            if rows:
                conn.execute(
                    sa.insert(run_inputs),
                    [
                        dict(run_id=run_id, role=i.role, path=i.path, sha256=i.sha256, parent_run=i.parent_run)
                        for i in rows
                    ],
                )
        return run_id

    def record_output(self, run_id: str, role: str, path: str | Path) -> None:
        """Link an output (file or dir) to its run with its content hash; a dir also gets the marker file."""
        path = Path(path).expanduser().resolve()
        run = self.get(run_id)
        sha = content_hash(path, role)
        with self.transaction() as conn:
            conn.execute(sa.insert(run_outputs).values(run_id=run_id, role=role, path=str(path), sha256=sha))
        if path.is_dir():
            marker = {"registry": self.location, "run_id": run_id, "run": run["name"], "role": role}
            write_text_atomic(path / MARKER, json.dumps(marker, indent=1) + "\n")

    def finish(self, run_id: str, outputs: dict, metrics: dict) -> None:
        with self.transaction() as conn:
            conn.execute(
                sa.update(runs)
                .where(runs.c.id == run_id)
                .values(
                    status="finished", outputs=json.dumps(outputs), metrics=json.dumps(metrics), finished_at=time.time()
                )
            )

    def fail(self, run_id: str, error: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                sa.update(runs).where(runs.c.id == run_id).values(status="failed", error=error, finished_at=time.time())
            )

    def mark_resumed(self, run_id: str, by: str) -> None:
        """An interrupted attempt (`failed` or left `running`) that attempt `by` resumed from its
        checkpoint: `resumed`, one run with it (listings show the newest attempt of a name)."""
        with self.transaction() as conn:
            row = conn.execute(sa.select(runs.c.error).where(runs.c.id == run_id)).first()
            why = f"{row.error}; " if row is not None and row.error else ""
            conn.execute(
                sa.update(runs)
                .where((runs.c.id == run_id) & runs.c.status.in_(["failed", "running"]))
                .values(
                    status="resumed",
                    error=f"{why}resumed by {by}",
                    finished_at=sa.func.coalesce(runs.c.finished_at, time.time()),
                )
            )

    def remove(self, run_ids: Sequence[str]) -> int:
        """Delete runs (and their input/output rows); returns how many went."""
        ids = list(run_ids)
        if not ids:
            return 0
        with self.transaction() as conn:
            for table in (run_inputs, run_outputs):
                conn.execute(sa.delete(table).where(table.c.run_id.in_(ids)))
            return conn.execute(sa.delete(runs).where(runs.c.id.in_(ids))).rowcount

    def record_eval(
        self,
        model: str | Path,
        report: str | Path,
        *,
        metrics: Mapping[str, Any] | None = None,
        gate: Mapping[str, Any] | None = None,
    ) -> int:
        """Record an evaluation of `model`: its report file (hashed) and the gate's verdict, if any.

        `gate` is `evals.gate.GateResult.to_dict()`. Returns the eval's id."""
        report = Path(report).expanduser().resolve()
        if not report.is_file():
            raise InputNotFound(f"eval report not found: {report}")
        run_id, model_str, model_sha = self.identify_model(model)
        with self.transaction() as conn:
            return inserted_id(
                conn.execute(
                    sa.insert(schema.evals).values(
                        run_id=run_id,
                        model=model_str,
                        model_sha256=model_sha,
                        report=str(report),
                        report_sha256=file_sha256(report),
                        metrics=json.dumps(dict(metrics or {})),
                        gate=json.dumps(dict(gate)) if gate is not None else None,
                        passed=bool(gate["passed"]) if gate is not None else None,
                        created_at=time.time(),
                    )
                )
            )

    # ------------------------------------------------------------------ reading
    def get(self, run_id: str) -> dict[str, Any]:
        """A run by id, or the newest run of that name. Raises KeyError."""
        with self.reading() as conn:
            row = conn.execute(
                sa.select(runs)
                .where((runs.c.id == run_id) | (runs.c.name == run_id))
                .order_by(runs.c.started_at.desc())
                .limit(1)
            ).first()
        if row is None:
            raise KeyError(f"no run {run_id!r} in {self.location}")
        return _decode(row)

    def latest(self, name: str) -> dict[str, Any] | None:
        """The newest run recorded under `name`, or None."""
        try:
            return self.get(name)
        except KeyError:
            return None

    def inputs(self, run_id: str) -> list[Input]:
        with self.reading() as conn:
            rows = conn.execute(sa.select(run_inputs).where(run_inputs.c.run_id == run_id).order_by(run_inputs.c.id))
            return [Input(r.path, r.role, r.sha256, r.parent_run) for r in rows]

    def outputs(self, run_id: str) -> list[dict[str, Any]]:
        """A run's recorded outputs: `{role, path, sha256}` in the order they were written."""
        with self.reading() as conn:
            rows = conn.execute(
                sa.select(run_outputs.c.role, run_outputs.c.path, run_outputs.c.sha256)
                .where(run_outputs.c.run_id == run_id)
                .order_by(run_outputs.c.id)
            )
            return [dict(r._mapping) for r in rows]

    def run_for_output(self, path: str | Path) -> dict[str, Any] | None:
        """The run that wrote output `path`, or None."""
        with self.reading() as conn:
            row = conn.execute(
                sa.select(run_outputs.c.run_id)
                .where(run_outputs.c.path == str(Path(path).expanduser().resolve()))
                .order_by(run_outputs.c.id.desc())
                .limit(1)
            ).first()
        return self.get(row.run_id) if row else None

    def identify_model(self, model: str | Path) -> tuple[str | None, str, str | None]:
        """(run id, path or spec, sha256) of a model: its marker or output row names the run,
        the recorded hash is reused (else a local checkpoint dir is hashed)."""
        p = model_dir(model)
        if not p.exists():
            return None, str(model), None
        p = p.resolve()
        marker = model_marker(p)
        with self.reading() as conn:
            row = conn.execute(
                sa.select(run_outputs.c.run_id, run_outputs.c.sha256)
                .where(run_outputs.c.path == str(p))
                .order_by(run_outputs.c.id.desc())
                .limit(1)
            ).first()
        run_id = marker["run_id"] if marker else (row.run_id if row else None)
        sha = row.sha256 if row is not None and row.sha256 else content_hash(p, "final")
        return run_id, str(p), sha

    def evals(self, *, run_id: str | None = None, model: str | Path | None = None) -> list[dict[str, Any]]:
        """Recorded evals of a run's models or of one model path, oldest first."""
        query = sa.select(schema.evals).order_by(schema.evals.c.id)
        if run_id is not None:
            query = query.where(schema.evals.c.run_id == run_id)
        if model is not None:
            p = model_dir(model)
            query = query.where(schema.evals.c.model == (str(p.resolve()) if p.exists() else str(model)))
        with self.reading() as conn:
            return [_decode(r) for r in conn.execute(query)]

    def get_eval(self, eval_id: int) -> dict[str, Any]:
        with self.reading() as conn:
            row = conn.execute(sa.select(schema.evals).where(schema.evals.c.id == eval_id)).first()
        if row is None:
            raise KeyError(f"no eval {eval_id} in {self.location}")
        return _decode(row)

    def lineage(self, run_id: str) -> list[LineageRow]:
        """Every input, with its role, of the run and of the runs its inputs came from: the runs
        that wrote its base model and the data passes that wrote its data files (one query)."""
        with self.reading() as conn:
            rows = conn.execute(_LINEAGE, {"run_id": run_id}).fetchall()
        return [LineageRow(r.depth, r.run_id, r.name, r.kind, r.role, r.path, r.sha256, r.parent_run) for r in rows]

    def list(self, limit: int = 50, *, resumed: bool = True) -> list[dict[str, Any]]:
        """The newest runs first; `resumed=False` leaves out attempts a later attempt resumed."""
        query = sa.select(runs).order_by(runs.c.started_at.desc()).limit(limit)
        if not resumed:
            query = query.where(runs.c.status != "resumed")
        with self.reading() as conn:
            return [_decode(r) for r in conn.execute(query)]

    def attempts(self, name: str) -> list[dict[str, Any]]:
        """Every attempt recorded under run name `name`, oldest first."""
        with self.reading() as conn:
            rows = conn.execute(sa.select(runs).where(runs.c.name == name).order_by(runs.c.started_at))
            return [_decode(r) for r in rows]

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _without_password(url: sa.URL) -> str:
    return sa.URL.create(
        url.drivername, url.username, None, url.host, url.port, url.database, url.query
    ).render_as_string(hide_password=False)


def inserted_id(result: sa.CursorResult) -> int:
    """The primary key an INSERT of one row created."""
    key = result.inserted_primary_key
    if key is None:
        raise RegistryError("the insert reported no primary key")
    return key[0]


def _engine(url: sa.URL) -> sa.Engine:
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    # A file opened per use (no pool shared across a fork); writers take the lock at BEGIN so
    # two processes never deadlock on a lock upgrade, and wait for each other up to 30 s.
    engine = sa.create_engine(url, poolclass=NullPool, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _manual_transactions(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's BEGIN below, not pysqlite's

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("registry_read") else "BEGIN IMMEDIATE")

    return engine


def _decode(row: sa.Row) -> dict[str, Any]:
    out = dict(row._mapping)
    for key in ("config", "inputs", "outputs", "metrics", "gate"):
        if key in out and out[key] is not None:
            out[key] = json.loads(out[key])
    return out
