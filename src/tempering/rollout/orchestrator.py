"""The asynchronous rollout orchestrator: samplers fill a bounded queue while the trainer consumes.

`RolloutSource` asks it for each rollout batch (`take`); it answers with a sampled and scored
batch (`Sampled`, from the source's own `_sample`: engine and reward workers, no trainer model)
and the policy version whose weights sampled it.

K = `grpo.max_off_policy_steps`, the staleness bound:

- **K = 0** is the synchronous path, on the trainer's thread: sync the trainer's model into the
  engine, sample, return. No thread, no snapshot (the in-process engine shares the model).
- **K > 0**: one sampler thread samples batches in order. Rollout batch i may start sampling
  only once the trainer has taken batch i - K (`take`, on the trainer's thread). At that moment
  the trainer holds the weights after its update on batch i - K - 1, and batch i trains after
  the updates on batches i - K .. i - 1: K updates at most, so no sampled token of it is more
  than K versions old when it trains (updates_per_batch is 1 with K > 0; a step the guard skips
  makes it fresher, a rollback staler, which the source's drop check catches). So at most K + 1
  batches are sampled ahead of the trainer: that is the queue's bound.
  The gate pins the weights batch i samples from: the newest snapshot published when its gate
  opens (`publish`, on the trainer's thread after each weight change: a CPU copy of the
  trainable tensors, so the trainer's in-place updates never race the sampler). The sampler
  syncs that snapshot into the engine before it samples. Pinning at the gate rather than at the
  sampler's start keeps a run deterministic (which weights sample batch i does not depend on
  thread timing), so a resumed run samples what the uninterrupted one would have. It costs up to
  K + 2 CPU copies of the trainable tensors (a LoRA adapter's: megabytes).

The engine must hold its own copy of the weights (a local engine process, `scale.process_engine`,
or Ray replicas): an engine sampling from the trainer's own model is refused with K > 0.

A checkpoint (`pending`) waits for every batch whose gate is open and records them all; a resume
(`restore`) hands them to the trainer as recorded, before any new batch is sampled.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from tempering.errors import UserError
from tempering.versions import Version

Snapshot = tuple[Version, dict[str, Any] | None]
"""Published weights: (version, the trainable tensors on the CPU); None before the first sync, or
without a trainer model (a test's engine that holds its own)."""


def trainable_snapshot(model: Any) -> dict[str, Any]:
    """A CPU copy of the model's trainable tensors (what an engine with its own base needs)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}


class Orchestrator:
    """Sampled batches for the trainer, at most `K` + 1 ahead of it (see the module docstring).

    `sample(version)` samples the next rollout batch from the weights the engine holds, which are
    `version`'s; it runs on the trainer's thread with K = 0, on the one sampler thread with K > 0.
    `sync(weights, version)` puts the model (the first sync, K = 0's every sync) or a published
    snapshot into the engine (`RolloutSource.sync_to`, which checks a sync when due).
    """

    def __init__(
        self, sample: Callable[[Version], Any], sync: Callable[[Any, Version], None], engine: Any, model: Any, K: int
    ):
        if K > 0 and model is not None and getattr(engine, "model", None) is model:
            raise UserError(
                f"grpo.max_off_policy_steps {K}: the engine samples from the trainer's own model, which the "
                "trainer updates in place; use an engine with its own copy (`sampler:` or `scale:`)"
            )
        self.sample, self.sync, self.engine, self.model, self.K = sample, sync, engine, model, K
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rollout-sampler") if K > 0 else None
        self._queue: deque[Future[tuple[Any, Version]]] = deque()  # gate-opened batches, in order
        self._published: Snapshot = (0, None)
        self._engine_version: Version | None = None  # the version the engine holds
        self._engine_lock = threading.Lock()  # held by the sampler for a whole batch (sync + sample)

    def publish(self, version: Version) -> None:
        """The trainer's weights are now `version` (trainer's thread): keep a snapshot for the gates to pin."""
        if self._executor is None or self.model is None:
            self._published = (version, None)
            return
        self._published = (version, trainable_snapshot(self.model))

    def take(self) -> tuple[Any, Version]:
        """The next batch the trainer trains on and the version that sampled it (trainer's thread)."""
        if self._executor is None:
            version = self._published[0]
            if self.model is not None:
                self.sync(self.model, version)
            return self.sample(version), version
        if self._engine_version is None:  # nothing sampling yet: the first sync, on this thread
            version, weights = self._published
            if self.model is not None:
                self.sync(self.model, version)  # the model itself: a replica checks its base once
                self._published = (version, trainable_snapshot(self.model) if weights is None else weights)
            self._engine_version = version
        # the trainer takes the queue's head; the batches up to K after it may start now. The wait
        # is bounded by the sampler's own deadlines (each engine call's, the verifier timeout)
        while len(self._queue) < self.K + 1:
            self._queue.append(self._executor.submit(self._sample_pinned, self._published))
        return self._queue.popleft().result()

    def pending(self) -> list[tuple[Any, Version]]:
        """The batches sampled for the trainer and not yet taken, with the versions that sampled
        them (waits for those sampling now)."""
        return [f.result() for f in self._queue]

    def restore(self, batches: list[tuple[Any, Version]]) -> None:
        """Batches recorded in a checkpoint (with the versions that sampled them), taken first, as recorded."""
        done: list[Future[tuple[Any, Version]]] = []
        for b in batches:
            f: Future[tuple[Any, Version]] = Future()
            f.set_result(b)
            done.append(f)
        self._queue = deque(done)

    @contextmanager
    def borrowed_engine(self) -> Iterator[None]:
        """The engine to another user (the held-out eval, on the trainer's thread) between two batches:
        waits for the batch sampling now; the next batch re-syncs its pinned weights first."""
        with self._engine_lock:
            yield
            if self._engine_version is not None:
                self._engine_version = -1  # the borrower may have synced other weights

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def _sample_pinned(self, pinned: Snapshot) -> tuple[Any, Version]:
        """Sampler thread: the pinned weights into the engine (when it holds others), then one batch."""
        version, weights = pinned
        with self._engine_lock:
            return self._sync_and_sample(version, weights)

    def _sync_and_sample(self, version: Version, weights: dict[str, Any] | None) -> tuple[Any, Version]:
        if version != self._engine_version and weights is not None:
            self.sync(weights, version)
            self._engine_version = version
        return self.sample(version), version

    def newer_weights(self) -> Version:
        """Partial rollouts (sampler thread, between two segments of a batch): the newest published
        snapshot into the engine when it holds older weights; the version it holds now. The batch's
        later tokens are then fresher than its pin: the bound still holds, but which weights sample
        them depends on the trainer's timing (a partial-rollout run is not reproducible step for step)."""
        version, weights = self._published
        if weights is not None and version != self._engine_version:
            self.sync(weights, version)
            self._engine_version = version
        assert self._engine_version is not None  # called only while a batch samples
        return self._engine_version
