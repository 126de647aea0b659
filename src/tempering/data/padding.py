"""Padding token lists into one batch: the one left- and right-padding every caller shares.

Prompts are left-padded (the engine, speculative decoding, the GRPO and agent batches,
preference and reward-model pairs); completions and whole sequences are right-padded.
"""

from __future__ import annotations

from typing import Sequence

import torch

PAD_ID = 0
"""Filler of padded positions: masked out of attention and scores, so any id works."""


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), both (B, longest), with each sequence right-aligned.

    Left padding puts every prompt's last token in the last column, so one batched forward
    predicts every prompt's next token at the same position (and a KV cache can grow to
    the right). Mask is 1 on real tokens.
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s) :] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids, mask


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), both (B, longest), with each sequence left-aligned; mask is 1 on real tokens."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
            mask[i, : len(s)] = 1
    return ids, mask
