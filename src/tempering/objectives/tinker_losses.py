"""The Tinker API's built-in losses as pure tensor code (`temper serve --tinker`).

Every loss is a SUM over the datum's positions (Tinker's convention: no normalisation; a
client that wants a mean scales `weights` or `advantages`). Per position t, with
logp = log p(target_tokens[t] | tokens[:t+1]) under the current weights:

  cross_entropy        -weights[t] * logp
  importance_sampling  -exp(logp - logprobs[t]) * advantages[t]       (logprobs: the sampler's)
  ppo                  -min(r * A, clip(r, clip_low_threshold, clip_high_threshold) * A),
                       r = exp(logp - logprobs[t]); thresholds default to 0.8 and 1.2

`ppo` and `importance_sampling` are GRPO's clipped surrogate (`grpo_math.grpo_loss_sum`) with
Tinker's ratio bounds, and with no clipping at all.
"""

from __future__ import annotations

import math

import torch

from tempering.objectives.grpo_math import grpo_loss_sum

INPUTS = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}
"""The loss inputs each built-in loss reads (all required)."""
CONFIG = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
}
"""`loss_fn_config` keys each loss takes, with their defaults."""


def tinker_loss(
    loss_fn: str,
    logp: torch.Tensor,  # (T,) log-probs of target_tokens under the current weights
    inputs: dict[str, torch.Tensor],  # (T,) each, as in INPUTS[loss_fn]
    config: dict[str, float],
) -> torch.Tensor:
    """The summed loss of one datum (a scalar with the graph of `logp`)."""
    if loss_fn == "cross_entropy":
        return -(inputs["weights"] * logp).sum()
    settings = {**CONFIG[loss_fn], **config}
    if loss_fn == "ppo":
        low, high = 1.0 - settings["clip_low_threshold"], settings["clip_high_threshold"] - 1.0
    else:  # importance_sampling: the unclipped ratio
        low, high = math.inf, math.inf
    numerator, _ = grpo_loss_sum(
        logp[None],
        inputs["logprobs"][None],
        inputs["advantages"][None],
        torch.ones_like(logp)[None],
        clip_low=low,
        clip_high=high,
        aggregation="token_mean",
    )
    return numerator
