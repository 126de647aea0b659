"""Token round-trip check: the text of a sampled completion re-encodes to the ids that were sampled.

The trainer learns from the sampled ids, but every later reader of an episode (a multi-turn
re-render, SFT on the model's own replies, a judge) sees its text. When decode -> encode does
not give the same ids (a non-canonical tokenisation the sampler happened to draw, a byte
fragment of a multi-byte character), the two views disagree; such an episode is flagged
`token_roundtrip` and counted (`roundtrip_mismatch_rate` in the step's metrics), not dropped.
"""

from __future__ import annotations

from typing import Any, Sequence

ROUNDTRIP_FLAG = "token_roundtrip"
"""The reward flag of an episode whose decoded text re-encodes to other ids."""


def roundtrip_ok(tokenizer: Any, ids: Sequence[int]) -> bool:
    """Whether `encode(decode(ids)) == ids` (special tokens kept, no space clean-up, nothing added)."""
    text = tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return tokenizer.encode(text, add_special_tokens=False) == list(ids)
