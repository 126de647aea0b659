"""Left-padding prompts into one batch: the one helper the engine and the GRPO batches share."""

from __future__ import annotations

from typing import Sequence

import torch


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
