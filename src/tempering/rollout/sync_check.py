"""The weight-sync check: after a sync to version v, the engine's log-probs against the trainer's at v.

A weight sync can fail silently: an engine that keeps its old weights still samples, and
training goes on off-policy by accident. Every `sync_check_every` steps (at the first sync after
the first weight change, then at the first sync at least that many steps after the last check)
the rollout source replays a small sample right after the sync (`rollout.replay.replay`: the
engine samples `CHECK_SAMPLES` x `CHECK_TOKENS` tokens of one fixed prompt, the trainer, which
still holds v, recomputes their log-probs). The largest gap is logged as `sync_check_max`
(`sync_check_version` beside it); past the replay epsilon of the engine's precision
(`FP32_EPSILON`, `BF16_EPSILON`) the run stops with `WeightSyncCheckFailed`.

An engine that samples from the trainer's own model object (the in-process `hf`, `batching` and
`speculative` engines) has no synced copy to compare: `shares_model` says so and nothing is checked.
"""

from __future__ import annotations

from typing import Any, Sequence

from tempering.config import SamplingParams
from tempering.errors import UserError
from tempering.rollout.engine import Engine
from tempering.rollout.replay import BF16_EPSILON, FP32_EPSILON, replay
from tempering.versions import Version

CHECK_SAMPLES = 2
"""Completions the check samples (of one prompt)."""
CHECK_TOKENS = 8
"""New tokens per completion the check samples: at most 16 tokens replayed per check."""


class WeightSyncCheckFailed(UserError):
    """The engine's log-probs after a weight sync are not the trainer's at that version."""


def replay_epsilon(precision: str) -> float:
    """The replay's bound on max |log p_train - log p_rollout| for an engine computing in `precision`."""
    return BF16_EPSILON if precision == "bf16" else FP32_EPSILON


def shares_model(engine: Any, model: Any) -> bool:
    """Whether `engine` samples from `model` itself (the in-process engines keep it as `engine.model`)."""
    return getattr(engine, "model", None) is model


class SyncCheck:
    """When a check is due, and the check itself (`after_sync`, on the trainer's thread, right after a sync)."""

    def __init__(self, every: int, precision: str, temperature: float, seed: int):
        self.every, self.precision, self.temperature, self.seed = every, precision, temperature, seed
        self.next_step = 1  # the first sync after the first weight change
        self._figures: dict[str, float] = {}

    def due(self, step: int) -> bool:
        return step >= self.next_step

    def after_sync(self, engine: Engine, model: Any, prompt: Sequence[int], version: Version, step: int) -> None:
        """Replay a small sample of `engine` (just synced to `version`) through `model` (still at `version`).

        Raises:
            WeightSyncCheckFailed: the largest gap is past the engine precision's replay epsilon.
        """
        self.next_step = step + self.every
        params = SamplingParams(
            n=CHECK_SAMPLES, max_new_tokens=CHECK_TOKENS, temperature=self.temperature, seed=self.seed + step
        )
        was_training = model.training
        model.eval()  # the check reads the weights, not dropout
        try:
            figures = replay(engine, model, [prompt], params, self.precision)
        finally:
            model.train(was_training)
        gap, bound = figures["max"], replay_epsilon(engine.precision)
        self._figures = {"sync_check_max": gap, "sync_check_version": float(version)}
        if not gap <= bound:  # NaN fails too
            raise WeightSyncCheckFailed(
                f"weight sync check at step {step}: the engine's log-probs after syncing version {version} are "
                f"{gap:.3g} from the trainer's at that version (max |d| over {figures['tokens']} tokens; "
                f"{engine.precision} replay epsilon {bound:g}): the engine does not hold the weights it was sent"
            )

    def metrics(self) -> dict[str, float]:
        """The last check's figures, once (then forgotten): `sync_check_max`, `sync_check_version`."""
        out, self._figures = self._figures, {}
        return out
