"""The Tinker API's built-in losses as pure tensor code (`temper tinker serve`), registered by
name (`tempering.algorithms.register_tinker_loss`): `forward_backward(data, loss_fn=NAME)`.

Every loss is a SUM over the datum's positions (Tinker's convention: no normalisation; a
client that wants a mean scales `weights` or `advantages`). Per position t, with
logp = log p(target_tokens[t] | tokens[:t+1]) under the current weights, q = the sampler's
log-prob the client sent (`logprobs`), A = `advantages`, r = exp(logp - q):

  cross_entropy        -weights * logp
  importance_sampling  -r A
  ppo                  -min(r A, clip(r, clip_low_threshold, clip_high_threshold) A)     0.8, 1.2
  cispo                -sg(clip(r, clip_low_threshold, clip_high_threshold)) A logp      0.8, 1.2
  dro                  -(logp A - beta/2 (logp - q)^2)                                   beta: required
  stable_reinforce     on sampled tokens only (the datum's provenance), with q' = the log-prob
                       the sampler RECORDED for that token (`sample(record_stability_info=True)`),
                       r' = exp(logp - q'):
                       -sg(min(r', clip_high_threshold)) A logp + kl_coeff k3(logp, q')   2.0, 0.0

The first five are Tinker's documented formulas (tinker-docs, Loss Functions); the thresholds'
defaults are Tinker's, and Tinker documents no default `beta` for dro, so it is required here.
Tinker does not publish StableReinforce's objective (only that it is a REINFORCE variant that
stays stable off-policy using information recorded at sampling time); ours is REINFORCE with a
truncated importance weight against the sampler's own recorded log-probs (TIS, Yao et al. 2025,
`objectives/off_policy.py`) plus an optional k3 KL to the sampler (`grpo_math.k3_kl`): the same
API and provenance rules, not Tinker's numbers. `ppo` and `importance_sampling` are GRPO's
clipped surrogate (`grpo_math.grpo_loss_sum`) with Tinker's ratio bounds, and unclipped.
"""

from __future__ import annotations

import math

import torch

from tempering.algorithms import register_tinker_loss
from tempering.objectives.grpo_math import grpo_loss_sum, k3_kl
from tempering.objectives.off_policy import importance_weights

RL_INPUTS = ("target_tokens", "logprobs", "advantages")
"""What the policy-gradient losses read: the sampled tokens, the sampler's log-probs, advantages."""
CLIP: dict[str, float | None] = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


@register_tinker_loss("cross_entropy", inputs=("target_tokens", "weights"))
def cross_entropy(logp: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """-sum(weights * logp): the weighted negative log-likelihood."""
    return -(inputs["weights"] * logp).sum()


def _surrogate(logp: torch.Tensor, inputs: dict[str, torch.Tensor], low: float, high: float) -> torch.Tensor:
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


@register_tinker_loss("importance_sampling", inputs=RL_INPUTS)
def importance_sampling(logp: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """-sum(r * A), the unclipped ratio r = p / q."""
    return _surrogate(logp, inputs, math.inf, math.inf)


@register_tinker_loss("ppo", inputs=RL_INPUTS, config=CLIP)
def ppo(
    logp: torch.Tensor, inputs: dict[str, torch.Tensor], *, clip_low_threshold: float, clip_high_threshold: float
) -> torch.Tensor:
    """-sum(min(r A, clip(r, low, high) A)): PPO's pessimistic clipped objective."""
    return _surrogate(logp, inputs, 1.0 - clip_low_threshold, clip_high_threshold - 1.0)


@register_tinker_loss("cispo", inputs=RL_INPUTS, config=CLIP)
def cispo(
    logp: torch.Tensor, inputs: dict[str, torch.Tensor], *, clip_low_threshold: float, clip_high_threshold: float
) -> torch.Tensor:
    """-sum(sg(clip(r, low, high)) * A * logp): the clipped ratio weighs the log-prob, every token
    keeps a gradient (Tinker clips both sides; GRPO's `cispo` policy loss only the top)."""
    ratio = torch.exp(logp - inputs["logprobs"])
    weight = ratio.clamp(clip_low_threshold, clip_high_threshold).detach()
    return -(weight * inputs["advantages"] * logp).sum()


@register_tinker_loss("dro", inputs=RL_INPUTS, config={"beta": None})
def dro(logp: torch.Tensor, inputs: dict[str, torch.Tensor], *, beta: float) -> torch.Tensor:
    """-sum(logp * A - beta / 2 * (logp - q)^2): REINFORCE with a quadratic pull to the sampler."""
    return -(logp * inputs["advantages"] - 0.5 * beta * (logp - inputs["logprobs"]) ** 2).sum()


@register_tinker_loss(
    "stable_reinforce", inputs=RL_INPUTS, config={"clip_high_threshold": 2.0, "kl_coeff": 0.0}, provenance=True
)
def stable_reinforce(
    logp: torch.Tensor, inputs: dict[str, torch.Tensor], *, clip_high_threshold: float, kl_coeff: float
) -> torch.Tensor:
    """Over sampled tokens (`sampled` 1): -sg(min(r', cap)) * A * logp + kl_coeff * k3(logp, q'),
    r' = p / q' against the log-prob the sampler recorded (`sampler_logprobs`); prompt tokens add 0."""
    sampled, recorded = inputs["sampled"], inputs["sampler_logprobs"]
    weight, _ = importance_weights(
        logp.detach()[None], recorded[None], sampled[None], "token_truncate", clip_high_threshold
    )
    per_token = -weight[0] * inputs["advantages"] * logp + kl_coeff * k3_kl(logp, recorded)
    return (per_token * sampled).sum()
