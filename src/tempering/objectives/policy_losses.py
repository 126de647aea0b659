"""Policy losses of the GRPO family, registered by name with their aggregation (`tempering.algorithms`).

Every loss maps per-token tensors to a per-token loss and the tokens where clipping changed it:

    fn(logp (B, T)        log-probs of the sampled tokens under the policy being trained,
       logp_old (B, T)    under the policy that sampled them (detached),
       advantages (B, T)  per token (a sequence's advantage repeated along its tokens),
       mask (B, T)        1 on the tokens that count,
       *, clip_low, clip_high) -> (per_token_loss (B, T), clipped (B, T) bool)

`grpo_math.grpo_loss_sum` adds the importance-sampling correction and the KL term, then reduces with
the registered aggregation (see `grpo_math`):

  name     ratio                              per-token loss                              aggregation
  grpo     r = exp(logp - logp_old)           -min(r A, clip(r, 1-lo, 1+hi) A)            seq_mean          DeepSeekMath, arXiv:2402.03300
  dapo     r                                  the same                                    token_mean        DAPO, Yu et al. 2025, arXiv:2503.14476
  dr_grpo  r                                  the same                                    constant          Dr. GRPO, Liu et al. 2025, arXiv:2503.20783
  bnpo     r                                  the same                                    micro_token_mean  as TRL's `bnpo` (tokens of the local batch)
  gspo     s = exp(mean_t (logp - logp_old))  -min(s A, clip(s, 1-lo, 1+hi) A) per token  seq_mean          GSPO, Zheng et al. 2025, arXiv:2507.18071
  cispo    r                                  -sg(min(r, 1+hi)) A logp                    token_mean        CISPO (MiniMax-M1), arXiv:2506.13585

Every built-in is registered `stale_safe` (the clipped ratio, or CISPO's capped weight, bounds an
update on an older policy's samples), so each may train with `grpo.max_off_policy_steps` > 0.

The names and aggregations follow TRL's `loss_type` (GSPO is TRL's `grpo` with
`importance_sampling_level="sequence"`; TRL's CISPO cap `epsilon_high` is our `1 + clip_high`).
GSPO's paper clips far tighter than the token-level losses (clip_low 3e-4, clip_high 4e-4).
"""

from __future__ import annotations

import torch

from tempering.algorithms import register_policy_loss


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic clipped objective, negated: (-min(r A, clip(r) A), where the clipped term won)."""
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


@register_policy_loss("grpo", aggregation="seq_mean", stale_safe=True)
@register_policy_loss("dapo", aggregation="token_mean", stale_safe=True)
@register_policy_loss("dr_grpo", aggregation="constant", stale_safe=True)
@register_policy_loss("bnpo", aggregation="micro_token_mean", stale_safe=True)
def token_clipped_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level clipped ratio: -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), r = p / p_old."""
    return clipped_surrogate(torch.exp(logp - logp_old), advantages, clip_low, clip_high)


@register_policy_loss("gspo", aggregation="seq_mean", stale_safe=True)
def sequence_clipped_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level ratio s = exp(mean over the sequence's tokens of log p/p_old), clipped (GSPO)."""
    m = mask.to(logp.dtype)
    log_s = ((logp - logp_old) * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    loss, clipped = clipped_surrogate(torch.exp(log_s), advantages, clip_low, clip_high)
    return loss.expand_as(logp), clipped.expand_as(logp)


@register_policy_loss("cispo", aggregation="token_mean", stale_safe=True)
def clipped_weight_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE with a clipped, detached importance weight: -sg(min(r, 1 + clip_high)) A log p (CISPO).

    Every token keeps a gradient (the weight is clipped, not the objective); `clip_low` is unused,
    as in the paper, which sets no lower bound.
    """
    ratio = torch.exp(logp - logp_old)
    cap = 1.0 + clip_high
    weight = torch.clamp(ratio, max=cap).detach()
    return -weight * advantages * logp, ratio > cap
