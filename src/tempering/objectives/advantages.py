"""Advantage estimators for outcome rewards, registered by name (`tempering.algorithms`).

Every estimator takes the rewards of a batch's samples and their group ids and returns one
advantage per sample; groups are the samples of one prompt (any size, any order):

    fn(rewards (M,) float, groups (M,) int64 ids in [0, n_groups)) -> advantages (M,)

`grpo_math.grpo_advantages` calls them for outcome rewards (n_groups, G) and for per-step rewards
(process supervision: each step's reward is one "sample" of its trajectory's group). Standard
deviations are population ones (divide by n); TRL's are Bessel-corrected (n - 1).

  grpo                   (r - mean_g) / (std_g + eps)                     DeepSeekMath, Shao et al. 2024, arXiv:2402.03300
  dr_grpo                r - mean_g                                       Dr. GRPO, Liu et al. 2025, arXiv:2503.20783
  rloo                   r - mean of the group's other samples            RLOO, Ahmadian et al. 2024, arXiv:2402.14740
                         = G / (G - 1) * (r - mean_g)
  reinforce_pp           (r - mean) / (std + eps) over the whole batch    REINFORCE++, Hu 2025, arXiv:2501.03262
  reinforce_pp_baseline  c = r - mean_g; c / (std(c) + eps) over the batch   REINFORCE++-baseline (same paper, v4)
  per_domain             c = r - mean_g; c / (std_d(c) + eps) within each domain d   (multi-domain RL)

`per_domain` is REINFORCE++-baseline with the batch split by domain (the samples' domain ids,
`domains` (M,) int64): every domain's advantages have unit scale, so a domain whose rewards span
0..10 does not drown one whose rewards span 0..1, and a domain's few-variance groups are not
blown up by their own tiny std (as `grpo`'s per-group division does). With one domain it is
`reinforce_pp_baseline`.

REINFORCE++ whitens per token in its reference code (OpenRLHF, verl); with one outcome reward per
sample these whiten per sample instead, so a long answer does not weigh more in the statistics.
A group whose rewards all match gets advantage 0 under the group estimators.
"""

from __future__ import annotations

import torch

from tempering.algorithms import register_advantage

EPS = 1e-6


def group_mean_count(values: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of each value's group, size of each value's group), both (M,)."""
    n = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, groups, torch.ones_like(values))
    mean = torch.zeros_like(count).index_add_(0, groups, values) / count.clamp(min=1)
    return mean[groups], count[groups]


def group_std(centred: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Population std of each value's group, (M,), from values already centred on their group mean."""
    n = int(groups.max()) + 1 if groups.numel() else 0
    count = torch.zeros(n, dtype=centred.dtype, device=centred.device).index_add_(0, groups, torch.ones_like(centred))
    var = torch.zeros_like(count).index_add_(0, groups, centred * centred) / count.clamp(min=1)
    return var.sqrt()[groups]


@register_advantage("grpo")
def grpo_group_normalised(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Group-normalised: (r - mean_g) / (std_g + eps) (DeepSeekMath GRPO)."""
    mean, _ = group_mean_count(rewards, groups)
    centred = rewards - mean
    return centred / (group_std(centred, groups) + EPS)


@register_advantage("dr_grpo")
def dr_grpo_centred(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Group-centred, no std division: r - mean_g (Dr. GRPO)."""
    mean, _ = group_mean_count(rewards, groups)
    return rewards - mean


@register_advantage("rloo")
def rloo_leave_one_out(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Leave-one-out baseline: r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g) (RLOO); 0 in a group of one."""
    mean, count = group_mean_count(rewards, groups)
    scale = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.zeros_like(count))
    return scale * (rewards - mean)


@register_advantage("reinforce_pp")
def reinforce_pp_batch_normalised(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Batch-normalised, no group baseline: (r - mean) / (std + eps) over every sample (REINFORCE++)."""
    centred = rewards - rewards.mean()
    return centred / (centred.pow(2).mean().sqrt() + EPS)


@register_advantage("reinforce_pp_baseline")
def reinforce_pp_group_baseline(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Group mean subtracted, then whitened over the batch (REINFORCE++-baseline)."""
    mean, _ = group_mean_count(rewards, groups)
    centred = rewards - mean
    centred = centred - centred.mean()  # 0 already when every group is whole; kept for partial batches
    return centred / (centred.pow(2).mean().sqrt() + EPS)


@register_advantage("per_domain", domains=True)
def per_domain_normalised(rewards: torch.Tensor, groups: torch.Tensor, domains: torch.Tensor) -> torch.Tensor:
    """Group mean subtracted, then whitened within each domain: (c - mean_d(c)) / (std_d(c) + eps)."""
    mean, _ = group_mean_count(rewards, groups)
    centred = rewards - mean
    domain_mean, _ = group_mean_count(centred, domains)  # 0 already when every group is whole
    centred = centred - domain_mean
    return centred / (group_std(centred, domains) + EPS)


def overlong_penalty(length: int, max_tokens: int, buffer: int, penalty: float = 1.0) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, Eq. 13), added to a response's reward:
    0 up to max_tokens - buffer tokens, then linearly down to -penalty at max_tokens."""
    start = max_tokens - buffer
    return 0.0 if length <= start else -penalty * min(length - start, buffer) / buffer
