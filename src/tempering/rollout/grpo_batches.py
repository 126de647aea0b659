"""The one GRPO batch builder: scored groups -> padded tensors -> micro-batches (+ the rollout policy's log-probs).

Single-turn (`rollout.source.RolloutSource`) and multi-turn (`agents.training.AgentRolloutSource`)
sources differ in how they sample, filter and credit groups; both hand the result here as
`GroupRows` (a group's prompt, its trajectories, their loss masks and advantages), so the
tensors, the filler micro-batches and `old_logprobs` are built in one place.

With `updates_per_batch` (mu) > 1 the batch is served mu times; from the second update on the
policy has moved, so the importance ratio needs the log-probs of the policy that sampled:
`PolicyLogprobs` recomputes them once, with the trainer's model, before the first update.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tempering.batches import PIXEL_KEYS, GRPOBatch
from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.models.logprobs import grouped_logprobs
from tempering.models.precision import autocast
from tempering.types import Trajectory
from tempering.versions import NOT_SAMPLED, is_stale


@dataclass
class GroupRows:
    """One group as the batch builder needs it.

    `loss_masks[i]` / `sampled_masks[i]` run over trajectory i's completion positions;
    `advantages` is (G,) (one per trajectory) or (G, T_g) per completion position (step credit);
    `pixels` the prompt's image inputs (`rollout.engine.ImagePrompt.pixels`; {} for a text prompt)."""

    prompt_ids: list[int]
    trajectories: list[Trajectory]
    loss_masks: list[list[int]]
    sampled_masks: list[list[int]]
    advantages: torch.Tensor
    pixels: dict[str, torch.Tensor] = field(default_factory=dict)


class PolicyLogprobs:
    """The rollout policy's log-probs of a batch, by the trainer's own forward (no grad, eval mode).

    The batch is built on the CPU; the forward runs where the model lives, and the result
    comes back to the CPU with the rest of the batch (the Trainer moves it all)."""

    def __init__(self, model: Any, precision: str, temperature: float):
        self.model, self.precision, self.temperature = model, precision, temperature

    @torch.no_grad()
    def __call__(self, batch: GRPOBatch) -> torch.Tensor:
        device = next(self.model.parameters()).device
        moved = batch.to(device)
        was = self.model.training
        self.model.eval()
        try:
            with autocast(self.precision, device):
                logp, _ = grouped_logprobs(
                    self.model,
                    moved.prompt_ids,
                    moved.prompt_mask,
                    moved.completion_ids,
                    moved.completion_mask,
                    self.temperature,
                    pixels=moved.pixels(),
                )
        finally:
            self.model.train(was)
        return logp.float().cpu()


def old_logprobs_for(model: Any, precision: str, temperature: float, updates_per_batch: int) -> PolicyLogprobs | None:
    """The recompute a source needs: one with mu > 1 (raises without a model), none with mu = 1."""
    if updates_per_batch == 1:
        return None
    if model is None:
        raise ValueError("updates_per_batch > 1 needs the trainer's model (the rollout policy's log-probs)")
    return PolicyLogprobs(model, precision, temperature)


def grpo_tensors(groups: Sequence[GroupRows]) -> GRPOBatch:
    """Pad the groups into one batch: prompts left-padded, completions right-padded to the longest."""
    prompt_ids, prompt_mask = left_pad([g.prompt_ids for g in groups], PAD_ID)
    trajs = [t for g in groups for t in g.trajectories]
    width = max(1, max(len(t.completion_ids) for t in trajs))
    masks = [(lm, sm) for g in groups for lm, sm in zip(g.loss_masks, g.sampled_masks)]
    completion_ids, completion_mask = right_pad([t.completion_ids for t in trajs], PAD_ID, width=width)
    loss_mask, _ = right_pad([lm for lm, _ in masks], 0, width=width)
    sampled_mask, _ = right_pad([sm for _, sm in masks], 0, width=width)
    logprobs = [t.completion_logprobs for t in trajs]
    engine_logprobs, _ = right_pad(logprobs, 0.0, width=width, dtype=torch.float32)
    versions, _ = right_pad([_completion_versions(t) for t in trajs], NOT_SAMPLED, width=width)
    return GRPOBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        loss_mask=loss_mask,
        sampled_mask=sampled_mask,
        engine_logprobs=engine_logprobs,
        advantages=_advantages([g.advantages for g in groups], width),
        n_real_tokens=int(completion_mask.sum()) + int(prompt_mask.sum()),
        versions=versions.masked_fill(sampled_mask == 0, NOT_SAMPLED),
        **_routing(groups, prompt_mask, width),
        **_pixels(groups),
    )


def _completion_versions(t: Trajectory) -> list[int]:
    """A trajectory's completion versions (all `NOT_SAMPLED` where it carries none)."""
    versions = t.completion_versions
    return versions if versions is not None else [NOT_SAMPLED] * len(t.completion_ids)


def _pixels(groups: Sequence[GroupRows]) -> dict[str, torch.Tensor]:
    """The groups' image inputs concatenated in group (= prompt row) order, as the engine's prefill
    stacks a chunk's prompts (`rollout.engine.prompt_pixels`); nothing for text prompts."""
    parts = [g.pixels for g in groups if g.pixels]
    return {k: torch.cat([p[k] for p in parts]) for k in PIXEL_KEYS if parts and k in parts[0]}


def _routing(groups: Sequence[GroupRows], prompt_mask: torch.Tensor, width: int) -> dict[str, torch.Tensor]:
    """The rollout's routing laid out like the prompt and completion tensors (router replay), or
    nothing where a trajectory carries none."""
    trajs = [t for g in groups for t in g.trajectories]
    if not trajs or any(t.routing is None for t in trajs):
        return {}
    per_token = [torch.tensor(t.routing, dtype=torch.long) for t in trajs]
    shape = per_token[0].shape[1:]  # (layers, k)
    prompt = torch.full((*prompt_mask.shape, *shape), -1, dtype=torch.long)
    rests = []
    first = 0
    for g, group in enumerate(groups):
        plen = len(group.prompt_ids)
        prompt[g][prompt_mask[g].bool()] = per_token[first][:plen]  # where the prompt's tokens sit
        rests += [per_token[i][plen:] for i in range(first, first + len(group.trajectories))]
        first += len(group.trajectories)
    completion, _ = right_pad(rests, -1, width=width)
    return {"prompt_routing": prompt, "completion_routing": completion}


def _advantages(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """(N,) when every group has one advantage per trajectory, else (N, width) zero-padded per token."""
    if all(p.dim() == 1 for p in parts):
        return torch.cat(parts).float()
    if any(p.dim() != 2 for p in parts):
        raise ValueError("a batch mixes per-trajectory and per-token advantages")
    out = torch.zeros((sum(p.shape[0] for p in parts), width), dtype=torch.float32)
    row = 0
    for p in parts:
        out[row : row + p.shape[0], : p.shape[1]] = p
        row += p.shape[0]
    return out


def served_versions(batch: GRPOBatch) -> list[int]:
    """The versions of the sampled tokens a micro-batch trains on ([] for a filler without loss),
    for a source's `VersionClock.served`."""
    if batch.versions is None or batch.n_real_tokens == 0:
        return []
    return batch.versions[batch.versions != NOT_SAMPLED].tolist()


def drop_stale_groups(batch: GRPOBatch, trainer_version: int, bound: int) -> tuple[GRPOBatch, int, int]:
    """(`batch` without the groups holding a sampled token more than `bound` steps older than
    `trainer_version`, groups judged, groups dropped). A group goes whole: its advantages are
    relative to each other. A filler, or a batch without versions, is judged on no group."""
    if batch.versions is None or batch.n_real_tokens == 0:
        return batch, 0, 0
    n_groups = batch.prompt_ids.shape[0]
    per_group = batch.versions.reshape(n_groups, -1).tolist()
    keep = [i for i, versions in enumerate(per_group) if not is_stale(trainer_version, versions, bound)]
    return batch.keep_groups(keep), n_groups, n_groups - len(keep)


def grpo_micro_batches(
    groups: Sequence[GroupRows],
    grad_accum: int,
    old_logprobs: Callable[[GRPOBatch], torch.Tensor] | None = None,
) -> list[GRPOBatch]:
    """Split whole groups into `grad_accum` micro-batches (fillers without loss when groups run out);
    `old_logprobs` (mu > 1) fills each micro-batch's rollout-policy log-probs."""
    if not groups:
        raise ValueError("a GRPO batch needs at least one group")
    n_micro = min(grad_accum, len(groups))
    per = math.ceil(len(groups) / n_micro)
    out = [grpo_tensors(groups[start : start + per]) for start in range(0, len(groups), per)]
    if old_logprobs is not None:
        out = [replace(b, old_logprobs=old_logprobs(b)) for b in out]
    while len(out) < grad_accum:
        out.append(out[-1].without_loss())
    return out
