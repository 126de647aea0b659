"""Padding token lists into one batch: the one left- and right-padding every caller shares.

Prompts are left-padded (the engine, speculative decoding, the GRPO and agent batches,
preference and reward-model pairs); completions and whole sequences are right-padded.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

PAD_ID = 0
"""Filler of padded positions: masked out of attention and scores, so any id works."""


def pad_id(tokenizer: Any) -> int:
    """The id a tokenizer's batches are padded with: its pad token, else its end-of-sequence token
    (Llama-style tokenizers have no pad; `models.load.load_tokenizer` makes EOS the pad too), else
    `PAD_ID`. The one rule for every engine, drafter, reward scorer and SFT batch."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return PAD_ID


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


def right_pad(
    seqs: Sequence[Sequence[float] | torch.Tensor],
    pad_id: float,
    *,
    width: int | None = None,
    dtype: torch.dtype = torch.long,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, mask): values (B, width, ...) with each sequence left-aligned, mask (B, width) long,
    1 on real entries. `width` defaults to the longest sequence. A sequence may be a tensor whose
    entries have a shape of their own (each token's routed experts, (n, layers, k)); `dtype`
    float32 pads per-token log-probs the same way ids are."""
    values = [torch.as_tensor(s if isinstance(s, torch.Tensor) else list(s), dtype=dtype) for s in seqs]
    width = max(len(v) for v in values) if width is None else width
    trailing = next((v.shape[1:] for v in values if len(v)), ())
    out = torch.full((len(values), width, *trailing), pad_id, dtype=dtype)
    mask = torch.zeros((len(values), width), dtype=torch.long)
    for i, v in enumerate(values):
        out[i, : len(v)] = v
        mask[i, : len(v)] = 1
    return out, mask
