"""The state behind `temper serve --tinker`: training models, sampling sessions, saved weights,
and the futures every Tinker call returns.

Each call is queued on ONE worker thread, in arrival order, and answered with a request id;
the client polls `retrieve_future` for the result (`Futures`). So a training client's
forward_backward, optim_step and save calls run in the order it sent them, and a sampler
saved after step k holds step k's weights.

Each training model is a registry run (`kind: tinker`) with its base model as the
`base_model` input and every saved checkpoint as an output (`state` / `sampler`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tempering.serve.config import TinkerServeConfig
from tempering.serve.tinker_ops import Sampler, Trainee, UserError, create_trainee
from tempering.serve.tinker_records import StabilityRecords

TINKER_SCHEME = "tinker://"


@dataclass(frozen=True)
class Session:
    """A sampling session: the model spec it loads, its base model and its tinker:// path."""

    spec: str
    base: str
    path: str | None


class Futures:
    """Results of queued calls by request id; a result is dropped `KEEP_S` seconds after it was
    first read (a client whose answer was lost in transit may read it again until then)."""

    KEEP_S = 600.0

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-worker")
        self._results: dict[str, Future] = {}
        self._read: dict[str, float] = {}  # request id -> when its result was first read
        self._lock = threading.Lock()

    def submit(self, call: str, fn: Callable[[], Any]) -> str:
        request_id = f"{call}-{uuid.uuid4().hex[:16]}"
        with self._lock:
            self._results[request_id] = self._pool.submit(fn)
            stale = [r for r, at in self._read.items() if time.monotonic() - at > self.KEEP_S]
            for r in stale:
                del self._results[r], self._read[r]
        return request_id

    async def wait(self, request_id: str, timeout: float) -> Future | None:
        """The finished future of `request_id`, or None if it is still running after `timeout`.

        Raises:
            KeyError: no such request.
        """
        with self._lock:
            future = self._results[request_id]
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
        except TimeoutError:
            return None
        except Exception:  # the call failed: its exception is read from the future
            pass
        with self._lock:
            self._read.setdefault(request_id, time.monotonic())
        return future

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class Jobs:
    """Training models, sampling sessions and saved weights of one deployment."""

    def __init__(self, cfg: TinkerServeConfig):
        self.cfg = cfg
        self.root = Path(cfg.state) / "tinker"
        self.futures = Futures()
        self.trainees: dict[str, Trainee] = {}
        self.runs: dict[str, str] = {}  # model id -> registry run id
        self.sessions: dict[str, Session] = {}
        self.records = StabilityRecords(cfg.max_recorded_tokens)
        self._samplers: OrderedDict[str, Sampler] = OrderedDict()
        self._registry: Any = None

    # ------------------------------------------------------------------ registry
    def registry(self) -> Any:
        if self._registry is None:
            from tempering.runs.registry import Registry

            self._registry = Registry(self.cfg.registry_location)
        return self._registry

    def create(self, model_id: str, base: str, rank: int, seed: int | None, parts: dict[str, bool]) -> dict:
        trainee = create_trainee(model_id, base, rank, seed, parts, self.cfg.precision)
        self.trainees[model_id] = trainee
        config = {"base_model": base, "lora_rank": rank, "seed": seed, **parts}
        self.runs[model_id] = self.registry().start(f"tinker-{model_id}", "tinker", config, [], base)
        return {"model_id": model_id, "type": "create_model"}

    def trainee(self, model_id: str, call: str) -> Trainee:
        if model_id not in self.trainees:
            raise UserError(f"{call}: no training model {model_id!r} on this server")
        return self.trainees[model_id]

    def record(self, model_id: str, role: str, path: Path) -> None:
        trainee = self.trainees[model_id]
        metrics = {"steps": trainee.steps, "loss_first": trainee.losses[0] if trainee.losses else None}
        metrics["loss_last"] = trainee.losses[-1] if trainee.losses else None
        metrics["losses"] = trainee.losses  # `loss:sum` of every training forward_backward, in order
        registry = self.registry()
        registry.record_output(self.runs[model_id], role, path)
        registry.finish(self.runs[model_id], {role: str(path)}, metrics)

    # ------------------------------------------------------------------ weights
    def save_dir(self, model_id: str, kind: str, name: str, call: str) -> tuple[Path, str]:
        """(directory, tinker:// path) of a named checkpoint; names are one path segment."""
        if not name or "/" in name or name in (".", "..") or "\\" in name:
            raise UserError(f"{call}: checkpoint name {name!r} must be one non-empty path segment")
        return self.root / model_id / kind / name, f"{TINKER_SCHEME}{model_id}/{kind}/{name}"

    def base_of(self, path: Path) -> str:
        """The base model saved weights were trained from (their training model's base)."""
        model_id = path.parent.parent.name
        trainee = self.trainees.get(model_id)
        if trainee is not None:
            return trainee.base
        from tempering.models.load import adapter_base

        return adapter_base(str(path)) or str(path)

    def resolve(self, tinker_path: str, call: str) -> Path:
        """The directory a `tinker://model/kind/name` path names on this server."""
        parts = tinker_path.removeprefix(TINKER_SCHEME).split("/")
        if not tinker_path.startswith(TINKER_SCHEME) or len(parts) != 3 or ".." in parts:
            raise UserError(f"{call}: {tinker_path!r} is not a tinker://MODEL/KIND/NAME path of this server")
        path = self.root.joinpath(*parts)
        if not path.is_dir():
            raise UserError(f"{call}: no checkpoint at {tinker_path}")
        return path

    # ------------------------------------------------------------------ sampling
    def open_session(self, spec: str, base: str, path: str | None) -> str:
        session_id = f"sampling-{uuid.uuid4().hex[:12]}"
        self.sessions[session_id] = Session(spec, base, path)
        return session_id

    def sampler(self, spec: str) -> Sampler:
        """The loaded sampler of `spec` (a saved-weights dir or a base model), LRU-cached."""
        if spec in self._samplers:
            self._samplers.move_to_end(spec)
            return self._samplers[spec]
        while len(self._samplers) >= self.cfg.max_samplers:
            self._samplers.popitem(last=False)
        sampler = Sampler(spec, self.cfg.precision, self.cfg.engine)
        self._samplers[spec] = sampler
        return sampler

    def close(self) -> None:
        self.futures.close()
        if self._registry is not None:
            self._registry.close()
