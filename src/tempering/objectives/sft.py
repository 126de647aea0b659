"""Supervised fine-tuning: next-token cross-entropy on assistant tokens only.

Normalisation: `masked_nll_sum` returns the *sum* of token losses and the number of
target tokens; the Trainer divides by the number of target tokens over the whole
optimizer step (all micro-batches), so accumulation 4x2 equals batch 8 and a packed
batch's loss equals the sum of its conversations' losses.

Log-probs come from `tempering.models.logprobs.head_logprobs` (shared with GRPO, DPO and
reward models), which projects only the target positions: non-assistant tokens never reach
the LM head. A batch with images (`pixel_values`) runs through the vision-language model's
backbone (`models.vlm.vlm_backbone`), which puts the image features in place of the image
tokens; the loss is the same. A sequence shard (context parallelism, `train.context_parallel`)
carries each position's next token as `targets`, since the next token of a shard's last position
lies on another process; the loss is the same sum over its targets (`next_token_nll_sum`).
"""

from __future__ import annotations

from typing import Any

import torch

from tempering.batches import SequenceShardBatch, SFTBatch, model_inputs
from tempering.models.checkpointing import checkpointed_now
from tempering.models.logprobs import LOGPROB_CHUNK_TOKENS, head_logprobs, output_head
from tempering.models.vlm import vlm_backbone
from tempering.types import IGNORE


def masked_nll_sum(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    labels: torch.Tensor,
    chunk_tokens: int | None = LOGPROB_CHUNK_TOKENS,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of -log p(label_{t+1} | <= t) over positions whose next label is not IGNORE.

    Args:
        hidden: (B, T, H) final hidden states.
        head: the output projection H -> V.
        labels: (B, T) token ids, IGNORE where no loss.
        chunk_tokens: target positions per LM-head chunk (None: all at once; see `head_logprobs`).
        recompute: recompute each chunk's logits in the backward (under activation checkpointing).
    Returns:
        (loss_sum scalar float32, n_targets scalar long)
    """
    return next_token_nll_sum(hidden[:, :-1], head, labels[:, 1:], chunk_tokens, recompute)


def next_token_nll_sum(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    chunk_tokens: int | None = LOGPROB_CHUNK_TOKENS,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of -log p(targets_t | hidden_t) over positions whose target is not IGNORE: `masked_nll_sum`
    with each position's next token already beside it (a sequence shard's `targets`).

    Args:
        hidden: (B, T, H) hidden states; targets: (B, T) the token each position predicts.
    Returns:
        (loss_sum scalar float32, n_targets scalar long)
    """
    keep = targets != IGNORE
    logp, _ = head_logprobs(head, hidden, targets, keep, chunk_tokens=chunk_tokens, recompute=recompute)
    return -logp.sum(), keep.sum()


def count_targets(batch: SFTBatch | SequenceShardBatch) -> int:
    """Target tokens in a batch: the normaliser's share of this micro-batch."""
    if "targets" in batch:  # a sequence shard (context parallelism): already shifted
        return int((batch["targets"] != IGNORE).sum())
    return int((batch["labels"][:, 1:] != IGNORE).sum())


class SFTObjective:
    """Assistant-only next-token loss; plugs into the Trainer."""

    name = "sft"

    def units(self, batch: SFTBatch | SequenceShardBatch) -> int:
        return count_targets(batch)

    def loss(self, model: Any, batch: SFTBatch | SequenceShardBatch) -> tuple[torch.Tensor, dict[str, float]]:
        inputs = model_inputs(batch)
        if "pixel_values" in inputs:  # images: the VLM's backbone merges their features into the text
            decoder, head = vlm_backbone(model)
        else:
            decoder, head = model.get_decoder(), output_head(model)
        hidden = decoder(**inputs, use_cache=False).last_hidden_state
        recompute = checkpointed_now(model)
        if "targets" in batch:  # a sequence shard: the next token may lie on another process
            loss_sum, _ = next_token_nll_sum(hidden, head, batch["targets"], recompute=recompute)
        else:
            loss_sum, _ = masked_nll_sum(hidden, head, batch["labels"], recompute=recompute)
        return loss_sum, {}
