"""Divergences between the student's and the teacher's next-token distributions, registered by name
(`tempering.algorithms`): what on-policy distillation minimises at every position of the student's
own samples when the teacher's full distribution is at hand (`rollout.divergence`).

Each takes two (N, V) log-softmaxes (one row per scored position, at the distillation temperature)
and returns the (N,) divergence per row; the objective sums the rows and the Trainer divides by the
step's scored tokens. The family follows Agarwal et al. 2024 ("On-Policy Distillation of Language
Models: Learning from Self-Generated Mistakes", GKD), eq. 1, as TRL's `GKDTrainer.generalized_jsd_loss`
implements it (the tests check it against TRL on identical tensors):

  forward_kl   KL(teacher || student) = sum_v p_t (log p_t - log p_s)      (mean-seeking)
  reverse_kl   KL(student || teacher) = sum_v p_s (log p_s - log p_t)      (mode-seeking)
  jsd          beta KL(teacher || M) + (1 - beta) KL(student || M),  M = beta p_t + (1 - beta) p_s;
               beta = 0 is forward KL and beta = 1 reverse KL (TRL's endpoints), between them a
               bounded interpolation

On the student's own samples, reverse KL over the whole vocabulary is the exact expectation of the
one-sample estimate log p_s(y) - log p_t(y) that the policy-gradient path (`reverse_kl_advantages`)
uses as a per-token reward: the same target without its sampling variance, at the price of the
teacher's full logits (a teacher in this process).
"""

from __future__ import annotations

import math

import torch

from tempering.algorithms import register_divergence


def _kl(p_logp: torch.Tensor, q_logp: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per row, (N, V) log-probs -> (N,); 0 * log 0 counts as 0."""
    return (p_logp.exp() * (p_logp - q_logp)).sum(dim=-1)


@register_divergence("forward_kl")
def forward_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) per row: (N, V), (N, V) -> (N,)."""
    return _kl(teacher_logp, student_logp)


@register_divergence("reverse_kl")
def reverse_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor) -> torch.Tensor:
    """KL(student || teacher) per row: (N, V), (N, V) -> (N,)."""
    return _kl(student_logp, teacher_logp)


@register_divergence("jsd")
def generalized_jsd(student_logp: torch.Tensor, teacher_logp: torch.Tensor, *, beta: float = 0.5) -> torch.Tensor:
    """GKD's generalised Jensen-Shannon divergence per row: (N, V), (N, V) -> (N,).

    beta KL(p_t || M) + (1 - beta) KL(p_s || M) with M = beta p_t + (1 - beta) p_s; beta = 0 and 1
    are forward and reverse KL (the mixture would degenerate there, so they are taken directly).
    """
    if beta <= 0.0:
        return forward_kl(student_logp, teacher_logp)
    if beta >= 1.0:
        return reverse_kl(student_logp, teacher_logp)
    mixture = torch.logsumexp(torch.stack([student_logp + math.log1p(-beta), teacher_logp + math.log(beta)]), dim=0)
    return beta * _kl(teacher_logp, mixture) + (1 - beta) * _kl(student_logp, mixture)
