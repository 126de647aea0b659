"""Who owns what on `temper tinker serve`, and where it lives on disk.

Every session, training client, saved checkpoint, sampling session and call belongs to the
key that made it. Another key asking for it gets the same 404 as for a thing that does not
exist (`NotFound`): the server never confirms that someone else's object is there. Nothing is
shared between keys.

Ids are the server's: a session id is `session-<12 hex>`, made by `create_session`; a training
client's id is `<session id>:train:<n>` (the SDK derives it the same way), accepted only for
a session of the calling key. A client's checkpoints live in `STATE/tinker/<model id>/` next
to `model.json`, the record of its owner, base model and session, written when the client is
created; a `tinker://<model id>/<kind>/<name>` path is read only after its parts match these
forms, its record names the caller, and the resolved directory is inside `STATE/tinker`.

Training clients live in memory. The records on disk outlive a restart: saved checkpoints stay
their owner's, and a record without a live client names a client the restart lost
(`Owners.lost`, and the 404 its owner gets says so and lists what was saved).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tempering.atomic import write_text_atomic
from tempering.errors import UserError

TINKER_SCHEME = "tinker://"
SESSION_ID = re.compile(r"session-[0-9a-f]{12}")
MODEL_ID = re.compile(r"session-[0-9a-f]{12}:train:[0-9]{1,9}")
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""A checkpoint name: one path segment of letters, digits, `_`, `-` and `.`, not starting with a dot."""
KINDS = ("weights", "sampler_weights")
RECORD = "model.json"


class NotFound(UserError):
    """No such object for this key: it does not exist, or another key owns it (the route's 404)."""


class OverCap(UserError):
    """A training client over the per-key or total cap (the route's 400)."""


@dataclass(frozen=True)
class ModelRecord:
    """A training client's owner and origin, as `model.json` keeps them."""

    model_id: str
    key: str
    session: str
    base: str


@dataclass(frozen=True)
class SamplingSession:
    """A sampling session: its owner and session, the model spec it loads, its base and its tinker:// path."""

    key: str
    session: str | None
    spec: str
    base: str
    path: str | None


class Owners:
    """The ownership records of one deployment (thread-safe; see the module docstring)."""

    def __init__(self, root: Path, max_per_key: int, max_total: int):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self.max_per_key, self.max_total = max_per_key, max_total
        self._lock = threading.Lock()
        self._sessions: dict[str, str] = {}  # session id -> key id
        self._models: dict[str, ModelRecord] = {}  # live (or being created) training clients
        self._sampling: dict[str, SamplingSession] = {}
        self.lost: dict[str, ModelRecord] = {r.model_id: r for r in self._records()}
        """Training clients recorded on disk by an earlier run of the server: lost when it stopped."""

    def _records(self) -> list[ModelRecord]:
        records = []
        for path in sorted(self.root.glob(f"*/{RECORD}")):
            record = self.record(path.parent.name)
            if record is not None:  # else not a record this server wrote
                records.append(record)
        return records

    # ------------------------------------------------------------------ sessions
    def open_session(self, key: str) -> str:
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._sessions[session_id] = key
        return session_id

    def session(self, session_id: str, key: str, call: str) -> str:
        with self._lock:
            if self._sessions.get(session_id) != key:
                raise NotFound(f"{call}: no session {session_id!r} on this server (a restart ends sessions)")
        return session_id

    def finish(self, session_id: str, key: str) -> list[str]:
        """End `key`'s session: the ids of its training clients, now released."""
        self.session(session_id, key, "finish_session")
        with self._lock:
            del self._sessions[session_id]
            released = [m for m, r in self._models.items() if r.session == session_id]
            for m in released:
                del self._models[m]
            for s in [s for s, v in self._sampling.items() if v.session == session_id]:
                del self._sampling[s]
        return released

    # ------------------------------------------------------------------ training clients
    def reserve(self, key: str, session_id: str, seq: int, base: str, call: str) -> str:
        """A new training client's id for `key`'s session, counted against the caps and
        recorded on disk before it is created.

        Raises:
            NotFound: the session is not `key`'s.
            OverCap: `key` or the server holds as many training clients as allowed.
            UserError: the id is taken.
        """
        self.session(session_id, key, call)
        model_id = f"{session_id}:train:{seq}"
        if not MODEL_ID.fullmatch(model_id):
            raise UserError(f"{call}: model_seq_id {seq} is not a number from 0 to 999999999")
        with self._lock:
            mine = sum(r.key == key for r in self._models.values())
            if mine >= self.max_per_key:
                raise OverCap(
                    f"{call}: this key holds {mine} training clients, this server's cap "
                    "(max_models_per_key); finish a session (ServiceClient.close) to free its clients"
                )
            if len(self._models) >= self.max_total:
                raise OverCap(f"{call}: the server holds {len(self._models)} training clients, its cap (max_models)")
            folder = self._inside(self.root / model_id)
            if model_id in self._models or folder.exists():
                raise UserError(f"{call}: training client {model_id} exists already")
            folder.mkdir()
            record = ModelRecord(model_id, key, session_id, base)
            write_text_atomic(
                folder / RECORD, json.dumps({"key": key, "session": session_id, "base": base, "at": time.time()})
            )
            self._models[model_id] = record
        return model_id

    def release(self, model_id: str) -> None:
        """Forget a client whose creation failed (its folder goes too when nothing was saved in it)."""
        with self._lock:
            self._models.pop(model_id, None)
            folder = self.root / model_id
            if folder.is_dir() and [p.name for p in folder.iterdir()] == [RECORD]:
                shutil.rmtree(folder)

    def model(self, model_id: str, key: str, call: str) -> ModelRecord:
        """`key`'s live training client `model_id`.

        Raises:
            NotFound: none of `key`'s (for its own client lost in a restart, the message says so).
        """
        with self._lock:
            record = self._models.get(model_id)
        if record is not None and record.key == key:
            return record
        lost = self.lost.get(model_id)
        if lost is not None and lost.key == key:
            saved = [str(p) for p in self.saved(model_id)] or ["none"]
            raise NotFound(
                f"{call}: training client {model_id} was lost when the server restarted (training clients "
                f"live in memory); its saved states: {', '.join(saved)} (create_training_client_from_state loads one)"
            )
        raise NotFound(f"{call}: no training client {model_id!r} on this server")

    def saved(self, model_id: str) -> list[str]:
        """tinker:// paths of the checkpoints saved under `model_id`."""
        folder = self.root / model_id
        return [
            f"{TINKER_SCHEME}{model_id}/{kind}/{p.name}"
            for kind in KINDS
            for p in sorted((folder / kind).glob("*"))
            if p.is_dir() and NAME.fullmatch(p.name)  # not a save's hidden temp dir
        ]

    # ------------------------------------------------------------------ checkpoints
    def _inside(self, path: Path) -> Path:
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root):
            raise UserError(f"{path} is outside the server's state directory")  # unreachable with checked parts
        return resolved

    def save_dir(self, model_id: str, kind: str, name: str, call: str) -> tuple[Path, str]:
        """(directory, tinker:// path) of a checkpoint of `model_id` named `name`."""
        if not NAME.fullmatch(name):
            raise UserError(
                f"{call}: checkpoint name {name!r} must be 1-128 letters, digits, '_', '-' or '.', not starting with '.'"
            )
        return self._inside(self.root / model_id / kind / name), f"{TINKER_SCHEME}{model_id}/{kind}/{name}"

    def checkpoint(self, tinker_path: str, key: str, call: str) -> Path:
        """The directory of `key`'s checkpoint at `tinker://MODEL/KIND/NAME`.

        Raises:
            NotFound: not such a path, or not `key`'s checkpoint, or not saved.
        """
        parts = tinker_path.removeprefix(TINKER_SCHEME).split("/")
        missing = NotFound(f"{call}: no checkpoint at {tinker_path!r} on this server")
        if not tinker_path.startswith(TINKER_SCHEME) or len(parts) != 3:
            raise missing
        model_id, kind, name = parts
        if not (MODEL_ID.fullmatch(model_id) and kind in KINDS and NAME.fullmatch(name)):
            raise missing
        record = self.record(model_id)
        if record is None or record.key != key:
            raise missing
        path = self._inside(self.root / model_id / kind / name)
        if not path.is_dir():
            raise missing
        return path

    def record(self, model_id: str) -> ModelRecord | None:
        """`model_id`'s record (a live client's, or the one on disk), or None."""
        with self._lock:
            record = self._models.get(model_id)
        if record is not None:
            return record
        try:
            data = json.loads((self.root / model_id / RECORD).read_text())
            return ModelRecord(model_id, data["key"], data["session"], data["base"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # ------------------------------------------------------------------ sampling sessions
    def open_sampling(self, session: SamplingSession) -> str:
        sampling_id = f"sampling-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._sampling[sampling_id] = session
        return sampling_id

    def sampling(self, sampling_id: str, key: str, call: str) -> SamplingSession:
        with self._lock:
            session = self._sampling.get(sampling_id)
        if session is None or session.key != key:
            raise NotFound(f"{call}: no sampling session {sampling_id!r} on this server")
        return session
