"""The Trainer's MoE duties: the balance terms added to every objective's loss (`train.moe`),
router replay from the batch, and per-layer load metrics for each step's record.

Every step record of an MoE model carries, over the step's training forward passes:
`moe_load_cv` (mean over layers of the load's coefficient of variation), `moe_load_max_over_mean`
(the worst layer's busiest expert over the mean), `moe_router_entropy` (mean over layers), and
per layer `moe_layer_share` (layers x experts), `moe_layer_cv`, `moe_layer_max_over_mean`,
`moe_layer_entropy`; with a balance term on, `moe_balance_loss` and `moe_z_loss` (unweighted,
mean over layers).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from tempering.config import MoESettings
from tempering.errors import UserError
from tempering.models.moe import balance_loss, load_cv, max_over_mean, router_entropy, router_z_loss
from tempering.models.routing import RouterTap, is_moe, num_experts


def check_moe_settings(model: Any, settings: MoESettings | None) -> None:
    """A one-line error where `train.moe` is set for a model without routers."""
    if settings is not None and not is_moe(model):
        raise UserError("train.moe: the model has no expert routers (a dense model); remove train.moe")


class MoEWatch:
    """Per-step accumulation over the micro-batches of an MoE model's router calls."""

    def __init__(self, model: Any, settings: MoESettings | None):
        self.model = model
        self.settings = settings or MoESettings(aux_loss=0.0, z_loss=0.0)
        self.experts = num_experts(model)
        self._reset()

    def _reset(self) -> None:
        self.counts: torch.Tensor | None = None  # (layers, E)
        self.entropy_sum: torch.Tensor | None = None  # (layers,)
        self.calls = 0
        self.balance: list[torch.Tensor] = []
        self.z: list[torch.Tensor] = []

    def tap(self, batch: Any) -> RouterTap:
        """The hooks for one micro-batch: recording, and replaying its routing when asked."""
        replay = []
        if self.settings.router_replay:
            routings = [getattr(batch, name, None) for name in ("prompt_routing", "completion_routing")]
            if any(r is None for r in routings):
                raise UserError(
                    "train.moe.router_replay: this batch carries no rollout routing (only single-turn "
                    "GRPO on the `hf` engine records it)"
                )
            replay = [r.reshape(-1, *r.shape[-2:]) for r in routings if r is not None]
        return RouterTap(self.model, replay=replay)

    def term(self, tap: RouterTap) -> torch.Tensor | float:
        """The weighted balance terms of one micro-batch (mean over layers and calls); its
        statistics go into the step's accumulators."""
        s = self.settings
        terms: list[torch.Tensor] = []
        counts, entropy = [], []
        for calls in tap.records:
            if not calls:
                return 0.0  # a forward pass without the routers (none recorded)
            counts.append(sum(torch.bincount(i.reshape(-1), minlength=self.experts) for _, i in calls))
            entropy.append(torch.stack([router_entropy(lg.detach()) for lg, _ in calls]).mean())
            for logits, indices in calls:
                if s.aux_loss > 0:
                    self.balance.append(b := balance_loss(logits, indices))
                    terms.append(s.aux_loss * b)
                if s.z_loss > 0:
                    self.z.append(z := router_z_loss(logits))
                    terms.append(s.z_loss * z)
        stacked = torch.stack(counts).to(torch.float64)
        self.counts = stacked if self.counts is None else self.counts + stacked
        ent = torch.stack(entropy)
        self.entropy_sum = ent if self.entropy_sum is None else self.entropy_sum + ent
        self.calls += 1
        n = sum(len(c) for c in tap.records)
        return torch.stack(terms).sum() / n if terms else 0.0  # mean over (layer, call)

    def stats(self) -> dict[str, Any]:
        """The step's MoE record (see the module docstring); resets the accumulators."""
        if self.counts is None or self.entropy_sum is None:
            self._reset()
            return {}
        share = self.counts / self.counts.sum(dim=1, keepdim=True).clamp(min=1.0)
        cv, peak = load_cv(share), max_over_mean(share)
        entropy = self.entropy_sum / self.calls
        out: dict[str, Any] = {
            "moe_load_cv": float(cv.mean()),
            "moe_load_max_over_mean": float(peak.max()),
            "moe_router_entropy": float(entropy.mean()),
            "moe_layer_share": [[round(float(x), 5) for x in row] for row in share],
            "moe_layer_cv": [round(float(x), 5) for x in cv],
            "moe_layer_max_over_mean": [round(float(x), 5) for x in peak],
            "moe_layer_entropy": [round(float(x), 5) for x in entropy],
        }
        if self.balance:
            out["moe_balance_loss"] = float(torch.stack(self.balance).detach().mean())
        if self.z:
            out["moe_z_loss"] = float(torch.stack(self.z).detach().mean())
        self._reset()
        return out


def tap_for(watch: MoEWatch | None, batch: Any) -> contextlib.AbstractContextManager[Any]:
    """The micro-batch's router hooks, or nothing for a dense model."""
    return watch.tap(batch) if watch is not None else contextlib.nullcontext()
