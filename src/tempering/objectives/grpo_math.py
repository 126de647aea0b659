"""GRPO-family policy loss as pure tensor code (no model, no I/O).

Checkable against the papers in minutes:
  * group-normalised advantages (DeepSeekMath GRPO): A_i = (r_i - mean_g) / (std_g + eps),
    or without the std division (Dr. GRPO, `scale_std=False`); groups given by row or by
    id, and per-step rewards (process supervision) for multi-turn agents;
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


def grpo_advantages(
    rewards: torch.Tensor,
    scale_std: bool = True,
    eps: float = 1e-6,
    groups: torch.Tensor | None = None,
    step_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Group-normalised advantages for outcome rewards or per-step rewards.

    Three shapes, one rule (normalise each reward by the mean and population std of all
    rewards of its group; std division off with `scale_std=False`, Dr. GRPO):

      * rewards (n_groups, group_size), `groups` None: outcome rewards grouped by row;
        returns the same shape (the GRPO paper's outcome supervision);
      * rewards (N,) with `groups` (N,) integer group ids: the same, for groups of any size
        in any order; returns (N,);
      * rewards (N, T) with `groups` (N,) and `step_mask` (N, T) marking the tokens that
        carry a step's reward (e.g. the last token of each agent turn): DeepSeekMath's
        process supervision. The group's statistics run over all its step rewards, and a
        token's advantage is the sum of the normalised rewards of its own and later steps
        (reverse cumulative sum); returns (N, T), 0 after the last step.

    A group whose rewards all match gets advantage 0 everywhere.
    """
    if groups is None:
        if rewards.dim() != 2:
            raise ValueError(f"rewards shaped {tuple(rewards.shape)} need group ids (`groups`)")
        n_groups, size = rewards.shape
        ids = torch.arange(n_groups, device=rewards.device).repeat_interleave(size)
        return _group_normalise(rewards.reshape(-1), ids, scale_std, eps).view(n_groups, size)
    if rewards.dim() == 1:
        return _group_normalise(rewards, groups, scale_std, eps)
    if step_mask is None or step_mask.shape != rewards.shape or groups.shape != rewards.shape[:1]:
        raise ValueError("step rewards (N, T) need groups (N,) and a step_mask (N, T)")
    keep = step_mask.bool()
    row_group = groups[:, None].expand_as(rewards)
    normalised = torch.zeros_like(rewards)
    normalised[keep] = _group_normalise(rewards[keep], row_group[keep], scale_std, eps)
    return normalised.flip(1).cumsum(1).flip(1)  # each token: its step and every later one


def _group_normalise(values: torch.Tensor, groups: torch.Tensor, scale_std: bool, eps: float) -> torch.Tensor:
    """(values - mean_g) / (std_g + eps) with each value's group g; values and groups (M,)."""
    n = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, groups, torch.ones_like(values))
    mean = torch.zeros_like(count).index_add_(0, groups, values) / count.clamp(min=1)
    centred = values - mean[groups]
    if not scale_std:
        return centred
    var = torch.zeros_like(count).index_add_(0, groups, centred * centred) / count.clamp(min=1)
    return centred / (var.sqrt()[groups] + eps)


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(q) - q - 1 with q = logp_ref - logp (>= 0)."""
    q = logp_ref - logp
    return torch.exp(q) - q - 1.0


def aggregation_units(mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None) -> float:
    """The denominator of an aggregation for one batch: valid tokens, sequences, or B x max_tokens."""
    if how == "token_mean":
        return float(mask.sum())
    if how == "seq_mean":
        return float(mask.shape[0])
    if how == "constant":
        if not max_tokens:
            raise ValueError("aggregation 'constant' needs max_tokens")
        return float(mask.shape[0] * max_tokens)
    raise ValueError(f"unknown aggregation {how!r}")


def aggregate_sum(
    per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None
) -> tuple[torch.Tensor, float]:
    """Reduce (B, T) per-token values over valid tokens (`mask` 1/0) to (numerator, units).

    numerator / units is the reduction documented above for one batch; over several
    micro-batches the Trainer divides the summed numerators by the summed units, which is
    the same reduction over the concatenated batch.
    """
    return aggregate_numerator(per_token, mask, how), aggregation_units(mask, how, max_tokens)


def aggregate_numerator(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation) -> torch.Tensor:
    """The numerator of `aggregate_sum` alone: no host read of the units (a GPU sync)."""
    m = mask.to(per_token.dtype)
    if how == "seq_mean":
        return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).sum()
    return (per_token * m).sum()


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None
) -> torch.Tensor:
    """`aggregate_sum` normalised over this batch alone (an empty mask gives 0)."""
    numerator, units = aggregate_sum(per_token, mask, how, max_tokens)
    return numerator / max(units, 1.0)


def grpo_loss_sum(
    logp: torch.Tensor,  # (B, T) log-probs of the sampled tokens under the current policy
    logp_old: torch.Tensor,  # (B, T) under the policy that sampled them (detached)
    advantages: torch.Tensor,  # (B,) one per sequence, or (B, T) one per token (step rewards)
    mask: torch.Tensor,  # (B, T) 1 on completion tokens that count
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "token_mean",
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO loss as (numerator, stats): what `GRPOObjective` hands the Trainer, which
    divides by the units of the whole step (`aggregation_units`).

    Per token: -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + beta * KL,
    reduced by `aggregate_numerator`. Stats: `clip_fraction` (share of valid tokens where the
    clipped term was the one used and differs), `kl` (mean k3 over valid tokens, 0 without
    a reference), `ratio_mean`.
    """
    ratio = torch.exp(logp - logp_old)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    m = mask.to(per_token.dtype)
    kl = torch.zeros((), dtype=per_token.dtype, device=per_token.device)
    if logp_ref is not None:
        kl_tok = k3_kl(logp, logp_ref)
        per_token = per_token + beta * kl_tok
        kl = (kl_tok * m).sum() / m.sum().clamp(min=1.0)
    with torch.no_grad():
        was_clipped = (clipped < unclipped).to(m.dtype)
        stats = {
            "clip_fraction": (was_clipped * m).sum() / m.sum().clamp(min=1.0),
            "kl": kl.detach(),
            "ratio_mean": (ratio * m).sum() / m.sum().clamp(min=1.0),
        }
    return aggregate_numerator(per_token, mask, aggregation), stats


def grpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "token_mean",
    max_tokens: int | None = None,
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`grpo_loss_sum` normalised over this one batch: (loss to minimise, stats)."""
    numerator, stats = grpo_loss_sum(logp, logp_old, advantages, mask, clip_low, clip_high, aggregation, logp_ref, beta)
    return numerator / max(aggregation_units(mask, aggregation, max_tokens), 1.0), stats
