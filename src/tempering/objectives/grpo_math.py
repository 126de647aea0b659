"""GRPO-family policy loss as pure tensor code (no model, no I/O).

Checkable against the papers in minutes:
  * group-normalised advantages (DeepSeekMath GRPO): A_i = (r_i - mean_g) / (std_g + eps),
    or without the std division (Dr. GRPO, `scale_std=False`);
  * clipped importance ratio with separate bounds (DAPO "clip-higher"):
    ratio clipped to [1 - clip_low, 1 + clip_high];
  * KL to a reference with the k3 estimator (Schulman): exp(q) - q - 1, q = logp_ref - logp;
  * loss aggregation:
      "token_mean"  sum over all valid tokens / number of valid tokens in the batch (DAPO)
      "seq_mean"    mean over tokens within each sequence, then mean over sequences (GRPO)
      "constant"    sum over all valid tokens / (batch size x max_tokens) (Dr. GRPO)
"""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token_mean", "seq_mean", "constant"]


def grpo_advantages(rewards: torch.Tensor, scale_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Advantages for rewards shaped (n_groups, group_size); returns the same shape.

    The std is the population std of each group (unbiased=False), as in the GRPO paper's
    normalisation; a group whose rewards all match gets advantage 0 everywhere.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_std:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=False) + eps)


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(q) - q - 1 with q = logp_ref - logp (>= 0)."""
    q = logp_ref - logp
    return torch.exp(q) - q - 1.0


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None) -> torch.Tensor:
    """Reduce (B, T) per-token values over valid tokens (`mask` 1/0) as documented above."""
    mask = mask.to(per_token.dtype)
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if how == "seq_mean":
        return ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()
    if how == "constant":
        if not max_tokens:
            raise ValueError("aggregation 'constant' needs max_tokens")
        return (per_token * mask).sum() / (per_token.shape[0] * max_tokens)
    raise ValueError(f"unknown aggregation {how!r}")


def grpo_loss(
    logp: torch.Tensor,  # (B, T) log-probs of the sampled tokens under the current policy
    logp_old: torch.Tensor,  # (B, T) under the policy that sampled them (detached)
    advantages: torch.Tensor,  # (B,) one per sequence
    mask: torch.Tensor,  # (B, T) 1 on completion tokens that count
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "token_mean",
    max_tokens: int | None = None,
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (to minimise) plus beta * k3 KL; returns (loss, stats).

    Per token: -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + beta * KL.
    Stats: `clip_fraction` (share of valid tokens where the clipped term was the one used
    and differs), `kl` (mean k3 over valid tokens, 0 without a reference), `ratio_mean`.
    """
    per_token, stats = grpo_per_token(logp, logp_old, advantages, mask, clip_low, clip_high, logp_ref, beta)
    return aggregate(per_token, mask, aggregation, max_tokens), stats


def grpo_per_token(logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   clip_low: float = 0.2, clip_high: float = 0.2, logp_ref: torch.Tensor | None = None,
                   beta: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The per-token loss (B, T) before aggregation, and the stats of `grpo_loss`."""
    ratio = torch.exp(logp - logp_old)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    m = mask.to(per_token.dtype)
    kl = torch.zeros((), dtype=per_token.dtype)
    if logp_ref is not None:
        kl_tok = k3_kl(logp, logp_ref)
        per_token = per_token + beta * kl_tok
        kl = (kl_tok * m).sum() / m.sum().clamp(min=1.0)
    with torch.no_grad():
        was_clipped = (clipped < unclipped).to(m.dtype)
        stats = {"clip_fraction": (was_clipped * m).sum() / m.sum().clamp(min=1.0), "kl": kl.detach(),
                 "ratio_mean": (ratio * m).sum() / m.sum().clamp(min=1.0)}
    return per_token, stats


def aggregate_sum(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation,
                  max_tokens: int | None = None) -> tuple[torch.Tensor, float]:
    """`aggregate` split into (numerator, units) so a trainer can normalise over a whole step.

    numerator / units == aggregate(...) for one batch; over several micro-batches the
    Trainer divides the summed numerators by the summed units, which is the same reduction
    over the concatenated batch.
    """
    m = mask.to(per_token.dtype)
    if how == "token_mean":
        return (per_token * m).sum(), float(m.sum())
    if how == "seq_mean":
        return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).sum(), float(per_token.shape[0])
    if how == "constant":
        if not max_tokens:
            raise ValueError("aggregation 'constant' needs max_tokens")
        return (per_token * m).sum(), float(per_token.shape[0] * max_tokens)
    raise ValueError(f"unknown aggregation {how!r}")
