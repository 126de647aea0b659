"""GRPO-family policy loss as pure tensor code (no model, no I/O).

The pieces are registered by name (`tempering.algorithms`): advantage estimators in
`objectives/advantages.py`, per-token policy losses with their aggregation in
`objectives/policy_losses.py`. This module composes them, checkable against the papers in minutes:
  * advantages for outcome rewards grouped by row or by id, and for per-step rewards
    (process supervision, multi-turn agents), by any registered estimator;
  * the registered per-token loss, times an optional importance-sampling weight against the
    rollout engine (`objectives/off_policy.py`: TIS / MIS), plus
  * KL to a reference with the k3 estimator (Schulman): exp(q) - q - 1, q = logp_ref - logp;
  * loss aggregation:
      "token_mean"        sum over all valid tokens / valid tokens of the optimizer step (DAPO)
      "seq_mean"          mean over tokens within each sequence, then mean over sequences (GRPO)
      "constant"          sum over all valid tokens / (batch size x max_tokens) (Dr. GRPO)
      "micro_token_mean"  token mean within each micro-batch, then mean over micro-batches (TRL's BNPO)
"""

from __future__ import annotations

from typing import Callable, Literal

import torch

from tempering import algorithms

Aggregation = Literal["token_mean", "seq_mean", "constant", "micro_token_mean"]


def grpo_advantages(
    rewards: torch.Tensor,
    estimator: str = "grpo",
    groups: torch.Tensor | None = None,
    step_mask: torch.Tensor | None = None,
    domains: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages by a registered estimator (`objectives/advantages.py`) for outcome or per-step rewards.

    Three shapes, one rule (the estimator sees every reward of the batch with its group id):

      * rewards (n_groups, group_size), `groups` None: outcome rewards grouped by row;
        returns the same shape (the GRPO paper's outcome supervision);
      * rewards (N,) with `groups` (N,) integer group ids: the same, for groups of any size
        in any order; returns (N,);
      * rewards (N, T) with `groups` (N,) and `step_mask` (N, T) marking the tokens that
        carry a step's reward (e.g. the last token of each agent turn): DeepSeekMath's
        process supervision. The estimator runs over all step rewards (a step is one sample of
        its trajectory's group), and a token's advantage is the sum of the advantages of its own
        and later steps (reverse cumulative sum); returns (N, T), 0 after the last step.

    `domains`: each group's domain id ((n_groups,) for the first shape, else (N,) per row); an
    estimator registered with `domains=True` (`per_domain`) normalises within each; the others
    ignore it. None: one domain.
    """
    algorithm = algorithms.lookup("advantage", estimator)
    fn = _with_domains(algorithm.fn) if algorithm.options.get("domains") else lambda r, g, d: algorithm.fn(r, g)
    if groups is None:
        if rewards.dim() != 2:
            raise ValueError(f"rewards shaped {tuple(rewards.shape)} need group ids (`groups`)")
        n_groups, size = rewards.shape
        ids = torch.arange(n_groups, device=rewards.device).repeat_interleave(size)
        per_sample = domains.repeat_interleave(size) if domains is not None else None
        return fn(rewards.reshape(-1), ids, per_sample).view(n_groups, size)
    if rewards.dim() == 1:
        return fn(rewards, groups, domains)
    if step_mask is None or step_mask.shape != rewards.shape or groups.shape != rewards.shape[:1]:
        raise ValueError("step rewards (N, T) need groups (N,) and a step_mask (N, T)")
    keep = step_mask.bool()
    row_group = groups[:, None].expand_as(rewards)
    row_domain = domains[:, None].expand_as(rewards)[keep] if domains is not None else None
    per_step = torch.zeros_like(rewards)
    per_step[keep] = fn(rewards[keep], row_group[keep], row_domain)
    return per_step.flip(1).cumsum(1).flip(1)  # each token: its step and every later one


def _with_domains(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A domain-aware estimator, given one domain (all zeros) when the caller names none."""

    def call(rewards: torch.Tensor, groups: torch.Tensor, domains: torch.Tensor | None) -> torch.Tensor:
        return fn(rewards, groups, domains if domains is not None else torch.zeros_like(groups))

    return call


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(q) - q - 1 with q = logp_ref - logp (>= 0)."""
    q = logp_ref - logp
    return torch.exp(q) - q - 1.0


def aggregation_units(mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None) -> float:
    """The denominator of an aggregation for one batch: valid tokens, sequences, B x max_tokens, or 1
    (`micro_token_mean` normalises inside each micro-batch, so the step averages micro-batches)."""
    if how == "token_mean":
        return float(mask.sum())
    if how == "seq_mean":
        return float(mask.shape[0])
    if how == "constant":
        if not max_tokens:
            raise ValueError("aggregation 'constant' needs max_tokens")
        return float(mask.shape[0] * max_tokens)
    if how == "micro_token_mean":
        return 1.0
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
    if how == "micro_token_mean":
        return (per_token * m).sum() / m.sum().clamp(min=1.0)
    return (per_token * m).sum()


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None
) -> torch.Tensor:
    """`aggregate_sum` normalised over this batch alone (an empty mask gives 0)."""
    numerator, units = aggregate_sum(per_token, mask, how, max_tokens)
    return numerator / max(units, 1.0)


def loss_aggregation(loss: str, aggregation: Aggregation | None = None) -> Aggregation:
    """The aggregation a policy loss runs with: the given one, else the one it was registered with."""
    return aggregation or algorithms.lookup("policy_loss", loss).options["aggregation"]


def grpo_loss_sum(
    logp: torch.Tensor,  # (B, T) log-probs of the sampled tokens under the current policy
    logp_old: torch.Tensor,  # (B, T) under the policy that sampled them (detached)
    advantages: torch.Tensor,  # (B,) one per sequence, or (B, T) one per token (step rewards)
    mask: torch.Tensor,  # (B, T) 1 on completion tokens that count
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation | None = None,
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
    loss: str = "dapo",
    is_weights: torch.Tensor | None = None,  # (B, T) or (B, 1): TIS / MIS weights (detached)
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO-family loss as (numerator, stats): what `GRPOObjective` hands the Trainer, which
    divides by the units of the whole step (`aggregation_units`).

    Per token: the registered policy loss `loss` (`objectives/policy_losses.py`; dapo's is
    -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)), times `is_weights` when
    given, + beta * KL; reduced by `aggregate_numerator` with `aggregation` (None: the loss's
    registered one). Stats: `clip_fraction` (share of valid tokens where clipping changed the
    loss), `kl` (mean k3 over valid tokens, 0 without a reference), `ratio_mean`.
    """
    adv = advantages.unsqueeze(1).expand_as(logp) if advantages.dim() == 1 else advantages
    per_token, clipped = algorithms.lookup("policy_loss", loss).fn(
        logp, logp_old, adv, mask, clip_low=clip_low, clip_high=clip_high
    )
    if is_weights is not None:
        per_token = per_token * is_weights
    m = mask.to(per_token.dtype)
    kl = torch.zeros((), dtype=per_token.dtype, device=per_token.device)
    if logp_ref is not None:
        kl_tok = k3_kl(logp, logp_ref)
        per_token = per_token + beta * kl_tok
        kl = (kl_tok * m).sum() / m.sum().clamp(min=1.0)
    with torch.no_grad():
        stats = {
            "clip_fraction": (clipped.to(m.dtype) * m).sum() / m.sum().clamp(min=1.0),
            "kl": kl.detach(),
            "ratio_mean": (torch.exp(logp - logp_old) * m).sum() / m.sum().clamp(min=1.0),
        }
    return aggregate_numerator(per_token, mask, loss_aggregation(loss, aggregation)), stats


def grpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation | None = None,
    max_tokens: int | None = None,
    logp_ref: torch.Tensor | None = None,
    beta: float = 0.0,
    loss: str = "dapo",
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`grpo_loss_sum` normalised over this one batch: (loss to minimise, stats)."""
    numerator, stats = grpo_loss_sum(
        logp, logp_old, advantages, mask, clip_low, clip_high, aggregation, logp_ref, beta, loss, is_weights
    )
    how = loss_aggregation(loss, aggregation)
    return numerator / max(aggregation_units(mask, how, max_tokens), 1.0), stats
