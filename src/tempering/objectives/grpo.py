"""GRPO as a Trainer objective: policy-gradient loss over one rollout batch.

A `GRPOBatch` (built by `tempering.rollout.grpo_batches` for single- and multi-turn sources)
holds whole groups: `prompt_ids`/`prompt_mask` (one left-padded row per group),
`completion_ids`/`loss_mask` (G right-padded rows per group), `advantages` (one per
completion, or per token), `engine_logprobs` (what the sampler reported; `sampled_mask` marks
where it sampled — the log-prob mismatch figures of `objectives/mismatch.py` are measured there) and, for mu > 1, `old_logprobs`
(the rollout policy, recomputed once before the first update). With mu = 1 the rollout policy *is* the current one, so the
ratio is exactly 1 and `logp.detach()` stands in for it.

The math lives in `grpo_math` (pure tensors: `grpo_loss_sum` is the loss its tests check), with
the policy loss and its aggregation looked up by name (`tempering.algorithms`) and the TIS / MIS
weights of `off_policy`; this file only wires them to a model.
"""

from __future__ import annotations

from typing import Any

import torch

from tempering import algorithms
from tempering.batches import GRPOBatch
from tempering.config import GRPOPolicySettings
from tempering.models.logprobs import grouped_logprobs
from tempering.objectives.grpo_math import Aggregation, aggregation_units, grpo_loss_sum, loss_aggregation
from tempering.objectives.mismatch import mismatch_stats
from tempering.objectives.off_policy import importance_weights


def _reference(model: Any):
    """Adapters off = the reference policy, without a second copy of the weights."""
    if hasattr(model, "disable_adapter"):
        return model.disable_adapter()
    raise ValueError("beta > 0 needs a LoRA model (the reference is the base with adapters disabled)")


class GRPOObjective:
    name = "grpo"
    loss_spikes = False  # a policy-gradient loss hovers around 0 and changes sign: no spike rule

    def __init__(self, settings: GRPOPolicySettings):
        self.s = settings
        algorithms.load(settings.plugins)  # a config built in another process has not imported them here
        self.aggregation: Aggregation = loss_aggregation(settings.loss, settings.aggregation)

    def units(self, batch: GRPOBatch) -> float:
        return aggregation_units(batch.loss_mask, self.aggregation, self.s.max_new_tokens)

    def loss(self, model: Any, batch: GRPOBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(summed loss, stats); the stats stay 0-dim tensors where the model is (the Trainer reads a
        step's stats in one host copy, not one GPU sync each)."""
        args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
        pixels = batch.pixels()  # image prompts: their pixels reach the policy (and the reference)
        logp, entropy = grouped_logprobs(model, *args, temperature=self.s.temperature, pixels=pixels)
        old = logp.detach() if batch.old_logprobs is None else batch.old_logprobs
        ref = None
        if self.s.beta > 0:
            with torch.no_grad(), _reference(model):
                ref, _ = grouped_logprobs(model, *args, temperature=self.s.temperature, pixels=pixels)
        mask, s = batch.loss_mask, self.s
        weights, is_stats = None, {}
        if s.off_policy is not None:
            o = s.off_policy
            weights, is_stats = importance_weights(
                old, batch.engine_logprobs, batch.sampled_mask, o.mode, o.cap, o.floor
            )
        numerator, stats = grpo_loss_sum(
            logp, old, batch.advantages, mask, s.clip_low, s.clip_high, self.aggregation, ref, s.beta, s.loss, weights
        )
        stats.update(is_stats)
        seen = batch.completion_mask.to(logp.dtype)
        n_seen = seen.sum().clamp(min=1.0)
        # the mismatch is measured where the engine sampled (agent batches: not on environment tokens,
        # whose engine log-prob is a placeholder 0)
        mismatch = mismatch_stats(logp, batch.engine_logprobs, batch.sampled_mask)
        return numerator, {**stats, "entropy": (entropy.detach() * seen).sum() / n_seen, **mismatch}
