"""Preference optimisation (the registered preference losses: DPO, IPO, SimPO, KTO, ORPO, ...) as a Trainer objective.

A batch (`data.pair_batches.PairBatches`) holds B pairs over B shared prompts; one
`grouped_logprobs` call with G = 2 runs each prompt once and both answers on its KV cache.
Sequence log-probs are sums over `score_mask` (the answers' assistant tokens).

The reference: cached sums in the batch (`ref_logps`, computed once before training, see
`train/reference.py`) when present; otherwise, under LoRA, the same model with adapters
disabled (no second copy of the weights). SimPO needs none.

The math is `objectives/preference.py`; this file only wires it to a model and reports
per-step metrics: reward accuracy, margin, chosen / rejected rewards and log-probs.
"""

from __future__ import annotations

from typing import Any

import torch

from tempering.batches import PairBatch
from tempering.config import PreferenceSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.objectives.preference import needs_reference, preference_losses


def pair_sequence_logps(model: Any, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(chosen sums (B,), rejected sums (B,), mean entropy of scored tokens) of one pair batch."""
    args = (batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])
    logp, entropy = grouped_logprobs(model, *args)
    score = batch["score_mask"].to(logp.dtype)
    sums = (logp * score).sum(dim=1)  # (2B,) rows [chosen_0, rejected_0, ...]
    mean_entropy = (entropy * score).sum() / score.sum().clamp(min=1)
    return sums[0::2], sums[1::2], mean_entropy


def adapters_disabled(model: Any) -> Any:
    """Context manager: the model with LoRA adapters off, i.e. the reference policy.

    Raises:
        ValueError: the model has no adapters (full-parameter training needs cached reference log-probs).
    """
    if hasattr(model, "disable_adapter"):
        return model.disable_adapter()
    raise ValueError(
        "an online reference needs a LoRA model (the base with adapters disabled); "
        "full-parameter training uses cached reference log-probs"
    )


def pair_sums(model: Any, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen sums, rejected sums) of a pair batch: what the reference cache stores."""
    chosen, rejected, _ = pair_sequence_logps(model, batch)
    return chosen, rejected


class PreferenceObjective:
    """Pairwise preference loss; units are pairs, so a step's loss is the weighted mean over its pairs."""

    def __init__(self, settings: PreferenceSettings):
        self.s = settings
        self.name = settings.loss
        self.needs_reference = needs_reference(settings.loss, settings.plugins)

    def units(self, batch: PairBatch) -> int:
        return int(batch["prompt_ids"].shape[0])

    def reference(self, model: Any, batch: PairBatch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.needs_reference:
            return None, None
        if "ref_logps" in batch:
            ref = batch["ref_logps"]
            return ref[:, 0], ref[:, 1]
        with torch.no_grad(), adapters_disabled(model):
            chosen, rejected, _ = pair_sequence_logps(model, batch)
        return chosen, rejected

    def loss(self, model: Any, batch: PairBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(summed loss, stats as 0-dim tensors where the model is: the Trainer reads them once per step)."""
        ref_chosen, ref_rejected = self.reference(model, batch)
        chosen, rejected, entropy = pair_sequence_logps(model, batch)
        lengths = batch["score_mask"].sum(dim=1).to(chosen.dtype)
        s = self.s
        losses, chosen_reward, rejected_reward = preference_losses(
            s.loss,
            chosen,
            rejected,
            ref_chosen,
            ref_rejected,
            lengths[0::2],
            lengths[1::2],
            beta=s.beta,
            label_smoothing=s.label_smoothing,
            gamma=s.simpo_gamma,
            sft_weight=s.sft_weight,
            plugins=s.plugins,
        )
        loss_sum = (losses * batch["weights"].to(losses.dtype)).sum()
        margin = chosen_reward - rejected_reward
        stats = {
            "reward_accuracy": (margin > 0).float().mean(),
            "reward_margin": margin.mean(),
            "reward_chosen": chosen_reward.mean(),
            "reward_rejected": rejected_reward.mean(),
            "logp_chosen": chosen.mean(),
            "logp_rejected": rejected.mean(),
            "entropy": entropy,
        }
        stats = {k: v.detach() for k, v in stats.items()}
        return loss_sum, stats
