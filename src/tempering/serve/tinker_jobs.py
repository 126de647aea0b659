"""The state behind `temper tinker serve`: training models, loaded samplers, the base models
clients may use, and the calls queue (`tinker_sched.py`) that every Tinker call runs through.

Each call is queued under its key and answered with a request id; the client polls
`retrieve_future` for the result. A key's calls run in the order it sent them, so a training
client's forward_backward, optim_step and save calls run in order, and a sampler saved after
step k holds step k's weights. Who owns what, and where it lives, is `tinker_owners.py`.

Each training model is a registry run (`kind: tinker`) with its base model as the
`base_model` input and every saved checkpoint as an output (`state` / `sampler`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tempering.batches import embedding_rows
from tempering.serve.config import TinkerServeConfig
from tempering.serve.tinker_ops import Sampler, Trainee, UserError, create_trainee
from tempering.serve.tinker_owners import Owners
from tempering.serve.tinker_records import StabilityRecords
from tempering.serve.tinker_sched import Scheduler


class Jobs:
    """Training models, samplers, ownership records and the calls queue of one deployment."""

    def __init__(self, cfg: TinkerServeConfig):
        self.cfg = cfg
        self.root = Path(cfg.state) / "tinker"
        self.owners = Owners(self.root, cfg.max_models_per_key, cfg.max_models)
        self.calls = Scheduler(cfg.call_timeout_s, cfg.max_queued_per_key, cfg.hang_grace_s)
        self.trainees: dict[str, Trainee] = {}
        self.runs: dict[str, str] = {}  # model id -> registry run id
        self.vocab: dict[str, int | None] = {}  # model spec -> rows of its input embedding
        self.records = StabilityRecords(cfg.max_recorded_tokens)  # samples kept for stable_reinforce, by key
        self._samplers: OrderedDict[str, Sampler] = OrderedDict()
        self._resolved: dict[str, str] | None = None  # resolved dir of each served base -> its spec
        self._lock = threading.Lock()
        self._registry: Any = None

    # ------------------------------------------------------------------ registry
    def registry(self) -> Any:
        if self._registry is None:
            from tempering.runs.registry import Registry

            self._registry = Registry(self.cfg.registry_location)
        return self._registry

    # ------------------------------------------------------------------ base models
    def served(self) -> list[str]:
        """The base models clients may train and sample (`model`, then `base_models`)."""
        return list(dict.fromkeys([self.cfg.model, *self.cfg.base_models]))

    def base_model(self, name: str, call: str) -> str:
        """The served base model `name` names (its spec, or the directory the spec resolves to);
        the client's text is compared, never loaded.

        Raises:
            UserError: not a served base model.
        """
        served = self.served()
        if name in served:
            return name
        with self._lock:
            if self._resolved is None:
                from tempering.models.load import ModelNotFound, resolve_model

                self._resolved = {}
                for spec in served:
                    try:
                        self._resolved[resolve_model(spec)] = spec
                    except ModelNotFound:
                        continue  # a configured base that does not load: create_model says so
        if name in self._resolved:
            return self._resolved[name]
        raise UserError(
            f"{call}: base model {name!r} is not served here (get_server_capabilities lists: {', '.join(served)})"
        )

    # ------------------------------------------------------------------ training models
    def create(self, model_id: str, base: str, rank: int, seed: int | None, parts: dict[str, bool]) -> dict:
        """Load `model_id`'s model (on the worker); a failure releases its reservation."""
        try:
            trainee = create_trainee(model_id, base, rank, seed, parts, self.cfg.precision)
        except BaseException:
            self.owners.release(model_id)
            raise
        self.trainees[model_id] = trainee
        self.vocab[base] = embedding_rows(trainee.model)
        config = {"base_model": base, "lora_rank": rank, "seed": seed, **parts}
        self.runs[model_id] = self.registry().start(f"tinker-{model_id}", "tinker", config, [], base)
        return {"model_id": model_id, "type": "create_model"}

    def trainee(self, model_id: str, call: str) -> Trainee:
        if model_id not in self.trainees:
            raise UserError(f"{call}: no training model {model_id!r} on this server")
        return self.trainees[model_id]

    def drop(self, model_ids: list[str]) -> None:
        """Free the models of released training clients (their saved checkpoints stay)."""
        for model_id in model_ids:
            self.trainees.pop(model_id, None)

    def record(self, model_id: str, role: str, path: Path) -> None:
        trainee = self.trainees[model_id]
        metrics = {"steps": trainee.steps, "loss_first": trainee.losses[0] if trainee.losses else None}
        metrics["loss_last"] = trainee.losses[-1] if trainee.losses else None
        metrics["losses"] = trainee.losses  # `loss:sum` of every training forward_backward, in order
        registry = self.registry()
        registry.record_output(self.runs[model_id], role, path)
        registry.finish(self.runs[model_id], {role: str(path)}, metrics)

    # ------------------------------------------------------------------ weights and sampling
    def base_of(self, path: Path) -> str:
        """The base model saved weights were trained from (their training model's record)."""
        record = self.owners.record(path.parent.parent.name)
        return record.base if record is not None else str(path)

    def sampler(self, spec: str) -> Sampler:
        """The loaded sampler of `spec` (a saved-weights dir or a base model), LRU-cached."""
        if spec in self._samplers:
            self._samplers.move_to_end(spec)
            return self._samplers[spec]
        while len(self._samplers) >= self.cfg.max_samplers:
            self._samplers.popitem(last=False)
        sampler = Sampler(spec, self.cfg.precision, self.cfg.engine)
        self._samplers[spec] = sampler
        self.vocab[spec] = embedding_rows(sampler.model)
        return sampler

    def close(self) -> None:
        self.calls.close(wait_s=self.cfg.shutdown_s)  # a running step ends before the process does
        if self._registry is not None:
            self._registry.close()
