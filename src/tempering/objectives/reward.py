"""Reward-model objective: Bradley-Terry on pairs of scalar scores.

    p(chosen > rejected) = sigmoid(r_c - r_r - m)
    loss per pair        = -w * log sigmoid(r_c - r_r - m)  [+ c * (r_c + r_r)^2]

`m` is an optional margin (Llama 2's RM: pairs labelled "much better" must be separated
by more); `w` a per-pair weight (e.g. annotator agreement); the optional centring term
(coefficient `c`, as TRL's `center_rewards_coefficient`) keeps scores near 0 so they
stay comparable across runs.

Normalisation: `bradley_terry_loss_sum` returns the *sum* over pairs; the Trainer divides
by the number of pairs in the optimizer step (`units`), so the logged loss is the mean
per-pair loss and accumulation 4x2 equals batch 8.

A batch comes in one of two layouts, with `weight` and `margin` (P,) in both:
  * full rows: `input_ids`/`attention_mask` (2P, T), the chosen rows first, then the
    rejected ones in the same pair order;
  * shared prompt: `prompt_ids`/`prompt_mask` (P, Lp, left-padded) and
    `completion_ids`/`completion_mask` (2P, Lc, right-padded) ordered chosen, rejected per
    pair; each prompt runs through the decoder once for both answers
    (`RewardModel.forward_grouped`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def bradley_terry_loss_sum(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | float = 0.0,
    weight: torch.Tensor | float = 1.0,
    center_coef: float = 0.0,
) -> torch.Tensor:
    """Summed Bradley-Terry loss over P pairs.

    Args:
        chosen: (P,) scores of the preferred responses.
        rejected: (P,) scores of the other responses.
        margin: scalar or (P,) margin the chosen score must exceed the rejected one by.
        weight: scalar or (P,) non-negative per-pair weights.
        center_coef: weight of the (r_c + r_r)^2 centring term (0: off).
    Returns:
        scalar: sum over pairs of w * -log sigmoid(r_c - r_r - m) (+ centring).
    """
    losses = -F.logsigmoid(chosen - rejected - margin) * weight  # (P,)
    if center_coef:
        losses = losses + center_coef * (chosen + rejected) ** 2
    return losses.sum()


def pair_stats(chosen: torch.Tensor, rejected: torch.Tensor) -> dict[str, float]:
    """Per-batch metrics: accuracy (a tie counts half), mean margin, mean scores."""
    diff = (chosen - rejected).detach().float()
    acc = ((diff > 0).float() + 0.5 * (diff == 0).float()).mean()
    return {
        "accuracy": float(acc),
        "margin": float(diff.mean()),
        "chosen_score": float(chosen.detach().float().mean()),
        "rejected_score": float(rejected.detach().float().mean()),
    }


class RewardObjective:
    """Bradley-Terry over a `RewardModel` (see module docstring for the batch layout)."""

    name = "reward_model"
    loss_spikes = True

    def __init__(self, center_coef: float = 0.0):
        self.center_coef = center_coef

    def units(self, batch: dict[str, Any]) -> int:
        if "prompt_ids" in batch:
            return int(batch["prompt_ids"].shape[0])
        return int(batch["input_ids"].shape[0] // 2)

    def scores(self, model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen (P,), rejected (P,)) scores, all 2P answers in one forward."""
        if "prompt_ids" in batch:
            scores = model.forward_grouped(
                batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
            )  # (2P,): chosen, rejected per pair
            return scores[0::2], scores[1::2]
        scores = model(batch["input_ids"], batch["attention_mask"])
        pairs = scores.shape[0] // 2
        return scores[:pairs], scores[pairs:]

    def loss(self, model: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        chosen, rejected = self.scores(model, batch)
        loss_sum = bradley_terry_loss_sum(
            chosen, rejected, batch.get("margin", 0.0), batch.get("weight", 1.0), self.center_coef
        )
        return loss_sum, pair_stats(chosen, rejected)
