"""The deployment's database: API keys (hashed), the append-only audit log, feedback, arena.

One SQLite file (`ServeConfig.state/serve.sqlite`) in WAL mode with `synchronous=FULL`:
a row is on disk when its insert returns, so a `kill -9` loses no committed row.

  keys      id, name, sha256 of the secret (the secret itself is shown once, never stored),
            per-key rate limit, revoked_at
  audit     one row per request: key, time, endpoint, model, release, token counts, latency,
            status, response id; request and response text only with `log_text`; prompt and
            sampled token ids with their log-probs only with `capture_tokens` (serve/capture.py).
            Triggers refuse UPDATE and DELETE: the log is append-only for every client,
            this module included.
  feedback  thumbs up/down, corrections, reports on a response id (append-only as well)
  battles   arena prompt + two anonymised answers, of the key that asked; `shared` when the
            prompt is the arena's own (any key may judge it), else private to that key
  turns     captured chat turns by turn hash (key, hash -> response id, choice): what a
            later request of the same key continues token-exactly (append-only)
  votes     one per (battle, key): the annotator is the key (its name), never a name the
            client types, so one key cannot outvote others on a battle

Every read a client can trigger takes its key id and filters on it: one key never sees
another key's audit rows, responses, feedback or private battles.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.errors import UserError

KEY_PREFIX = "tml-"
"""What a new key starts with: the prefix the Tinker SDK insists on, so one key serves the OpenAI
and the Tinker server as printed. Keys made before (`tmp-...`) stay valid: only hashes are stored."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, sha256 TEXT NOT NULL UNIQUE,
  rate_limit INTEGER, created_at REAL NOT NULL, revoked_at REAL);
CREATE TABLE IF NOT EXISTS audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL, at REAL NOT NULL, endpoint TEXT NOT NULL,
  model TEXT, release INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER, latency_ms REAL,
  status INTEGER NOT NULL, response_id TEXT, request TEXT, response TEXT);
CREATE INDEX IF NOT EXISTS audit_key ON audit (key_id);
CREATE INDEX IF NOT EXISTS audit_response ON audit (response_id);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TABLE IF NOT EXISTS feedback (
  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, response_id TEXT NOT NULL, kind TEXT NOT NULL,
  correction TEXT, comment TEXT, task TEXT, created_at REAL NOT NULL);
CREATE TRIGGER IF NOT EXISTS feedback_no_update BEFORE UPDATE ON feedback
  BEGIN SELECT RAISE(ABORT, 'feedback is append-only'); END;
CREATE TRIGGER IF NOT EXISTS feedback_no_delete BEFORE DELETE ON feedback
  BEGIN SELECT RAISE(ABORT, 'feedback is append-only'); END;
CREATE TABLE IF NOT EXISTS battles (
  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, prompt TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL,
  answer_a TEXT NOT NULL, answer_b TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS votes (
  id INTEGER PRIMARY KEY AUTOINCREMENT, battle_id TEXT NOT NULL REFERENCES battles(id), key_id TEXT NOT NULL,
  annotator TEXT NOT NULL, choice TEXT NOT NULL, created_at REAL NOT NULL, UNIQUE (battle_id, annotator));
CREATE TABLE IF NOT EXISTS turns (
  key_id TEXT NOT NULL, turn_hash TEXT NOT NULL, response_id TEXT NOT NULL, choice INTEGER NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS turns_key_hash ON turns (key_id, turn_hash);
CREATE TRIGGER IF NOT EXISTS turns_no_update BEFORE UPDATE ON turns
  BEGIN SELECT RAISE(ABORT, 'turns are append-only'); END;
CREATE TRIGGER IF NOT EXISTS turns_no_delete BEFORE DELETE ON turns
  BEGIN SELECT RAISE(ABORT, 'turns are append-only'); END;
CREATE TRIGGER IF NOT EXISTS votes_no_update BEFORE UPDATE ON votes
  BEGIN SELECT RAISE(ABORT, 'votes are append-only'); END;
"""


class StoreError(UserError):
    """A refused store operation; the message is one line for the user."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    rate_limit: int | None
    created_at: float
    revoked_at: float | None


def hash_secret(secret: str) -> str:
    """Keys are 256-bit random secrets, so one sha256 is enough (no password stretching needed)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _migrate(conn: sqlite3.Connection) -> None:
    """Columns added after a deployment's database was made. A battle of an older database is
    private to its key (`shared` 0): who may see its prompt was not recorded. An audit row of an
    older database has no captured tokens."""
    if "tokens" not in {row[1] for row in conn.execute("PRAGMA table_info(audit)")}:
        conn.execute("ALTER TABLE audit ADD COLUMN tokens TEXT")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(battles)")}
    if "shared" not in columns:
        conn.execute("ALTER TABLE battles ADD COLUMN shared INTEGER NOT NULL DEFAULT 0")
    if "image" not in columns:  # the prompt's picture (a data URL), shown to annotators; NULL: a text prompt
        conn.execute("ALTER TABLE battles ADD COLUMN image TEXT")


class Store:
    """The deployment database; thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(SCHEMA)
            _migrate(self._conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _run(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def _insert(self, sql: str, args: tuple) -> int:
        with self._lock:
            rowid = self._conn.execute(sql, args).lastrowid
        if rowid is None:  # sqlite3 sets it for every INSERT
            raise sqlite3.OperationalError(f"no row id after {sql.split('(')[0].strip()!r}")
        return rowid

    # ------------------------------------------------------------------ keys
    def create_key(self, name: str, rate_limit: int | None = None) -> tuple[ApiKey, str]:
        """A new key named `name`: (its record, the secret, shown this once)."""
        if not name.strip():
            raise StoreError("a key needs a non-empty name")
        if self._run("SELECT 1 FROM keys WHERE name = ?", (name,)):
            raise StoreError(f"a key named {name!r} exists already")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey("key-" + secrets.token_hex(4), name, rate_limit, time.time(), None)
        self._insert(
            "INSERT INTO keys VALUES (?, ?, ?, ?, ?, NULL)",
            (key.id, name, hash_secret(secret), rate_limit, key.created_at),
        )
        return key, secret

    def keys(self) -> list[ApiKey]:
        return [_key(r) for r in self._run("SELECT * FROM keys ORDER BY created_at")]

    def revoke_key(self, name_or_id: str) -> ApiKey:
        rows = self._run("SELECT * FROM keys WHERE name = ? OR id = ?", (name_or_id, name_or_id))
        if not rows:
            raise StoreError(f"no key named {name_or_id!r}")
        if rows[0]["revoked_at"] is None:
            self._run("UPDATE keys SET revoked_at = ? WHERE id = ?", (time.time(), rows[0]["id"]))
        return _key(self._run("SELECT * FROM keys WHERE id = ?", (rows[0]["id"],))[0])

    def authenticate(self, secret: str) -> ApiKey | None:
        """The live key with this secret, or None (unknown or revoked: read on every request,
        so a revocation holds from the next request on)."""
        rows = self._run("SELECT * FROM keys WHERE sha256 = ? AND revoked_at IS NULL", (hash_secret(secret),))
        return _key(rows[0]) if rows else None

    def key_of(self, secret: str) -> ApiKey | None:
        """The key with this secret, revoked or not (to file a refused request under it)."""
        rows = self._run("SELECT * FROM keys WHERE sha256 = ?", (hash_secret(secret),)) if secret else []
        return _key(rows[0]) if rows else None

    # ------------------------------------------------------------------ audit
    def audit(
        self,
        key_id: str,
        endpoint: str,
        status: int,
        *,
        model: str | None = None,
        release: int | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        latency_ms: float | None = None,
        response_id: str | None = None,
        request: Any = None,
        response: Any = None,
        tokens: dict[str, Any] | None = None,
    ) -> int:
        """Append one audit row; `request` / `response` (JSON-able) and `tokens` (serve/capture.py)
        only when the deployment opts in."""
        return self._insert(
            "INSERT INTO audit (key_id, at, endpoint, model, release, prompt_tokens, completion_tokens, latency_ms, "
            "status, response_id, request, response, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key_id,
                time.time(),
                endpoint,
                model,
                release,
                prompt_tokens,
                completion_tokens,
                latency_ms,
                status,
                response_id,
                _dump(request),
                _dump(response),
                _dump(tokens),
            ),
        )

    def add_turns(self, key_id: str, response_id: str, hashes: list[str]) -> None:
        """Index a captured chat answer's choices by their turn hashes (serve/capture.py)."""
        with self._lock:
            self._conn.executemany(
                "INSERT INTO turns VALUES (?, ?, ?, ?, ?)",
                [(key_id, h, response_id, i, time.time()) for i, h in enumerate(hashes)],
            )

    def captured_turn(self, key_id: str, turn_hash: str) -> tuple[str, int, dict[str, Any]] | None:
        """(response id, choice, captured tokens) of the newest answer served to `key_id` with this
        turn hash, or None."""
        rows = self._run(
            "SELECT t.response_id, t.choice, a.tokens FROM turns t JOIN audit a ON a.response_id = t.response_id "
            "AND a.key_id = t.key_id AND a.status = 200 AND a.tokens IS NOT NULL "
            "WHERE t.key_id = ? AND t.turn_hash = ? ORDER BY a.id DESC LIMIT 1",
            (key_id, turn_hash),
        )
        return (rows[0]["response_id"], rows[0]["choice"], json.loads(rows[0]["tokens"])) if rows else None

    def captured(self) -> list[dict[str, Any]]:
        """Every answered request with captured tokens, oldest first (all keys: the operator's export)."""
        return [_row(r) for r in self._run("SELECT * FROM audit WHERE status = 200 AND tokens IS NOT NULL ORDER BY id")]

    def audit_rows(self, key_id: str | None, limit: int = 100, after: int = 0) -> list[dict[str, Any]]:
        """Audit rows of one key (None: all keys, for the operator's CLI only), oldest first."""
        where, args = ("key_id = ? AND id > ?", (key_id, after)) if key_id else ("id > ?", (after,))
        return [_row(r) for r in self._run(f"SELECT * FROM audit WHERE {where} ORDER BY id LIMIT ?", (*args, limit))]

    def response(self, key_id: str, response_id: str) -> dict[str, Any] | None:
        """The audit row of a response served to `key_id` (None if absent or another key's)."""
        rows = self._run(
            "SELECT * FROM audit WHERE response_id = ? AND key_id = ? AND status = 200", (response_id, key_id)
        )
        return _row(rows[0]) if rows else None

    # ------------------------------------------------------------------ feedback
    def add_feedback(
        self,
        key_id: str,
        response_id: str,
        kind: str,
        correction: str | None = None,
        comment: str | None = None,
        task: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if self.response(key_id, response_id) is None:
            raise KeyError(response_id)
        fid = "fb-" + secrets.token_hex(8)
        self._insert(
            "INSERT INTO feedback VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (fid, key_id, response_id, kind, correction, comment, _dump(task), time.time()),
        )
        return self._feedback_row(fid)

    def _feedback_row(self, fid: str) -> dict[str, Any]:
        return _row(self._run("SELECT * FROM feedback WHERE id = ?", (fid,))[0])

    def feedback(self, key_id: str | None) -> list[dict[str, Any]]:
        """Feedback rows of one key (None: all, for the operator's export), oldest first."""
        where, args = ("WHERE key_id = ?", (key_id,)) if key_id else ("", ())
        return [_row(r) for r in self._run(f"SELECT * FROM feedback {where} ORDER BY created_at, id", args)]

    def feedback_with_responses(self) -> list[dict[str, Any]]:
        """Every feedback row joined with the audit row of its response (for the export)."""
        rows = self._run(
            "SELECT f.*, a.model, a.release, a.request, a.response FROM feedback f "
            "LEFT JOIN audit a ON a.response_id = f.response_id AND a.key_id = f.key_id "
            "AND a.status = 200 ORDER BY f.created_at, f.id"
        )
        return [_row(r) for r in rows]

    # ------------------------------------------------------------------ arena
    def add_battle(
        self,
        key_id: str,
        prompt: str,
        models: tuple[str, str],
        answers: tuple[str, str],
        shared: bool = False,
        image: str | None = None,
    ) -> str:
        """A new battle of `key_id`; `shared`: any key may be shown and vote on it (else only its own);
        `image`: the prompt's picture as a data URL."""
        bid = "battle-" + secrets.token_hex(8)
        self._insert(
            "INSERT INTO battles (id, key_id, prompt, model_a, model_b, answer_a, answer_b, created_at, shared, image) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (bid, key_id, prompt, models[0], models[1], answers[0], answers[1], time.time(), int(shared), image),
        )
        return bid

    def battle(self, battle_id: str, key_id: str) -> dict[str, Any] | None:
        """The battle if `key_id` may see it (shared, or its own), else None."""
        rows = self._run("SELECT * FROM battles WHERE id = ? AND (shared = 1 OR key_id = ?)", (battle_id, key_id))
        return _row(rows[0]) if rows else None

    def open_battle(self, key_id: str, max_votes: int) -> dict[str, Any] | None:
        """The oldest battle `key_id` may see and has not voted on, with fewer than `max_votes` votes."""
        rows = self._run(
            "SELECT b.* FROM battles b WHERE (b.shared = 1 OR b.key_id = ?) AND NOT EXISTS "
            "(SELECT 1 FROM votes v WHERE v.battle_id = b.id AND v.key_id = ?) "
            "AND (SELECT COUNT(DISTINCT v.key_id) FROM votes v WHERE v.battle_id = b.id) < ? "
            "ORDER BY b.created_at LIMIT 1",
            (key_id, key_id, max_votes),
        )
        return _row(rows[0]) if rows else None

    def add_vote(self, key: ApiKey, battle_id: str, choice: str) -> None:
        """`key`'s one vote on a battle (its annotator is the key's name); a second is a StoreError.
        One statement checks and inserts, so two racing votes of one key cannot both land."""
        try:
            with self._lock:
                added = self._conn.execute(
                    "INSERT INTO votes (battle_id, key_id, annotator, choice, created_at) SELECT ?, ?, ?, ?, ? "
                    "WHERE NOT EXISTS (SELECT 1 FROM votes WHERE battle_id = ? AND key_id = ?)",
                    (battle_id, key.id, key.name, choice, time.time(), battle_id, key.id),
                ).rowcount
        except sqlite3.IntegrityError:
            added = 0
        if not added:
            raise StoreError(f"key {key.name!r} has already voted on {battle_id}")

    def votes(self) -> list[dict[str, Any]]:
        """Every counted vote with its battle (models, prompt, answers), oldest first: the first
        of each key on a battle (a database from before votes were tied to keys may hold more)."""
        rows = self._run(
            "SELECT v.id, v.battle_id, v.annotator, v.choice, v.created_at, b.prompt, b.model_a, "
            "b.model_b, b.answer_a, b.answer_b FROM votes v JOIN battles b ON b.id = v.battle_id "
            "WHERE v.id IN (SELECT MIN(id) FROM votes GROUP BY battle_id, key_id) ORDER BY v.id"
        )
        return [_row(r) for r in rows]


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for k in ("request", "response", "task", "tokens"):
        if out.get(k) is not None:
            out[k] = json.loads(out[k])
    return out


def _key(row: sqlite3.Row) -> ApiKey:
    return ApiKey(row["id"], row["name"], row["rate_limit"], row["created_at"], row["revoked_at"])
