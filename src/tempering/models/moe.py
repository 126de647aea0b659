"""Mixture-of-experts routers: load statistics and the balance losses, as pure tensor functions.

A router sends each token to its `k` highest-scoring of `E` experts. Normalisations:

* `expert_share`: the fraction of the (token, slot) assignments each expert received, (E,),
  summing to 1 (uniform load: 1/E each). Every row the router saw counts, pad rows included.
* `load_cv`: std / mean of the shares (population std): 0 when balanced, sqrt(E - 1) when one
  expert takes everything.
* `router_entropy`: mean over tokens of the entropy (nats) of softmax(router logits).
* `balance_loss` (Switch Transformer, Fedus et al. 2021; what transformers' MoE models add as
  `router_aux_loss_coef` x it): E * sum_e share_e * mean_prob_e, with the shares counted from
  the chosen experts (no gradient) and the mean probabilities differentiable. 1 when balanced,
  E at worst.
* `router_z_loss` (ST-MoE, Zoph et al. 2022): mean over tokens of logsumexp(logits)^2; keeps
  the logits small so the softmax stays well conditioned.
"""

from __future__ import annotations

import torch


def expert_share(indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(E,) share of the assignments per expert; `indices` (T, k) are the chosen experts."""
    counts = torch.bincount(indices.reshape(-1), minlength=num_experts).to(torch.float32)
    return counts / counts.sum().clamp(min=1.0)


def load_cv(share: torch.Tensor) -> torch.Tensor:
    """Coefficient of variation of the shares (last dim): std / mean, population std."""
    mean = share.mean(dim=-1)
    return share.std(dim=-1, correction=0) / mean.clamp(min=1e-12)


def max_over_mean(share: torch.Tensor) -> torch.Tensor:
    """The busiest expert's share over the mean share (1 when balanced, E at worst)."""
    return share.amax(dim=-1) / share.mean(dim=-1).clamp(min=1e-12)


def router_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the routing distributions of (T, E) logits."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1).mean()


def balance_loss(logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """E * sum_e share_e * mean_prob_e over (T, E) logits and their (T, k) chosen experts."""
    num_experts = logits.shape[-1]
    share = expert_share(indices, num_experts).to(logits.device)
    mean_prob = torch.softmax(logits.float(), dim=-1).mean(dim=0)
    return num_experts * (share * mean_prob).sum()


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of logsumexp(logits)^2."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def replayed_scores(logits: torch.Tensor, indices: torch.Tensor, normalise: bool) -> torch.Tensor:
    """The routing weights of given experts `indices` (T, k): their softmax probabilities under
    `logits` (T, E), renormalised over the k when the model does so (`norm_topk_prob`)."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32).gather(-1, indices)
    if normalise:
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs.to(logits.dtype)
