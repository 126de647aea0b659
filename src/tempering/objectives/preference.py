"""Preference losses over per-sequence log-probs: DPO (sigmoid, cDPO), IPO, SimPO, + SFT on chosen.

Pure tensor math, checkable against the papers (and against TRL in the tests). Every
function takes per-pair tensors of shape (B,) and returns the per-pair loss (B,); the
caller weights and sums them (the Trainer divides by the pairs of the optimizer step, so
with unit weights the step loss is the mean over pairs, as in TRL).

Inputs, per pair:
  policy_chosen / policy_rejected   log pi(y | x), summed over the answer's scored tokens
  ref_chosen / ref_rejected         the same under the reference policy
  chosen_len / rejected_len         scored tokens per answer (for IPO and SimPO averages)

  DPO    (Rafailov et al. 2023)   d = (pc - rc) - (pr - rr)
         loss = -(1 - eps) log s(beta d) - eps log s(-beta d)
         eps = label_smoothing > 0 is conservative DPO (cDPO: labels flipped with prob. eps).
  IPO    (Azar et al. 2023, Eq. 17)  the log-ratios averaged over each answer's tokens (as
         TRL does, confirmed with the IPO authors): d = (pc - rc)/Lc - (pr - rr)/Lr,
         loss = (d - 1/(2 beta))^2
  SimPO  (Meng et al. 2024)       reference-free, length-normalised:
         m = beta (pc/Lc - pr/Lr) - gamma,  loss = -(1 - eps) log s(m) - eps log s(-m)
  SFT    (RPO, Pang et al. 2024)  alpha * (-pc / Lc): NLL of the chosen answer per token,
         added to any of the above (`sft_weight`).

Rewards for metrics are the implicit ones, beta * log-ratio (SimPO: beta * average log-prob).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

LossType = Literal["dpo", "ipo", "simpo"]
REFERENCE_FREE = ("simpo",)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """DPO sigmoid loss per pair (B,); `label_smoothing` > 0 gives cDPO."""
    delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -(1 - label_smoothing) * F.logsigmoid(beta * delta) - label_smoothing * F.logsigmoid(-beta * delta)


def ipo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """IPO squared loss per pair (B,) on per-token log-ratios; beta is IPO's tau."""
    delta = (policy_chosen - ref_chosen) / chosen_len.clamp(min=1) - (
        policy_rejected - ref_rejected
    ) / rejected_len.clamp(min=1)
    return (delta - 1 / (2 * beta)) ** 2


def simpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    beta: float,
    gamma: float,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """SimPO loss per pair (B,): reference-free, length-normalised, target margin `gamma`."""
    margin = beta * (policy_chosen / chosen_len.clamp(min=1) - policy_rejected / rejected_len.clamp(min=1)) - gamma
    return -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)


def sft_term(policy_chosen: torch.Tensor, chosen_len: torch.Tensor) -> torch.Tensor:
    """Per-token NLL of the chosen answer per pair (B,) (RPO's added term)."""
    return -policy_chosen / chosen_len.clamp(min=1)


def preference_losses(
    loss_type: LossType,
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor | None,
    ref_rejected: torch.Tensor | None,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    *,
    beta: float,
    label_smoothing: float = 0.0,
    gamma: float = 0.0,
    sft_weight: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss per pair, chosen reward, rejected reward), all (B,); rewards carry no gradient.

    Raises:
        ValueError: a reference-based loss without reference log-probs, or an unknown loss.
    """
    if loss_type in REFERENCE_FREE:
        losses = simpo_loss(policy_chosen, policy_rejected, chosen_len, rejected_len, beta, gamma, label_smoothing)
        chosen_reward = beta * policy_chosen.detach() / chosen_len.clamp(min=1)
        rejected_reward = beta * policy_rejected.detach() / rejected_len.clamp(min=1)
    else:
        if ref_chosen is None or ref_rejected is None:
            raise ValueError(f"loss {loss_type!r} needs reference log-probs")
        if loss_type == "dpo":
            losses = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, label_smoothing)
        elif loss_type == "ipo":
            losses = ipo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_len, rejected_len, beta)
        else:
            raise ValueError(f"unknown preference loss {loss_type!r} (dpo, ipo or simpo)")
        chosen_reward = beta * (policy_chosen - ref_chosen).detach()
        rejected_reward = beta * (policy_rejected - ref_rejected).detach()
    if sft_weight:
        losses = losses + sft_weight * sft_term(policy_chosen, chosen_len)
    return losses, chosen_reward, rejected_reward
