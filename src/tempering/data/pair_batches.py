"""Batches of rendered preference pairs laid out for one shared prompt forward.

A batch of B pairs is what `models.logprobs.grouped_logprobs` takes with G = 2:

    prompt_ids, prompt_mask          (B, P)   left-padded, one row per pair
    completion_ids, completion_mask  (2B, C)  right-padded, rows [chosen_0, rejected_0, chosen_1, ...]
    score_mask                       (2B, C)  1 on the answer's assistant tokens (what is summed)
    weights                          (B,)     the pairs' loss weights
    ref_logps                        (B, 2)   cached reference sums (chosen, rejected), when given
    index                            (B,)     the pairs' positions in the training set

The prompt runs once for both answers and only prompt + answer tokens are laid out (no
second copy of the prompt padded to the longer answer, as a [chosen; rejected]
concatenation would need).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch

from tempering.batches import PairBatch
from tempering.data.batches import EpochWalk
from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.data.pair_render import RenderedPair, Side


def collate_pairs(pairs: Sequence[RenderedPair], pad_id: int = PAD_ID) -> PairBatch:
    """Tensors of one batch (see the module docstring; no `ref_logps` / `index`)."""
    prompt_ids, prompt_mask = left_pad([p.prompt_ids for p in pairs], pad_id)
    sides: list[tuple[RenderedPair, Side]] = [
        (pair, side) for pair in pairs for side in ("chosen", "rejected")
    ]  # rows 2i, 2i + 1
    completion_ids, completion_mask = right_pad([pair.ids(side) for pair, side in sides], pad_id)
    score_mask, _ = right_pad([pair.mask(side) for pair, side in sides], 0)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "score_mask": score_mask,
        "weights": torch.tensor([p.weight for p in pairs], dtype=torch.float32),
        "n_real_tokens": sum(p.n_tokens for p in pairs),
    }


def pairs_fingerprint(pairs: Sequence[RenderedPair]) -> str:
    """sha256 of every pair's tokens, masks and weight (the data part of cache keys and resume checks)."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(repr((p.prompt_ids, p.chosen_ids, p.chosen_mask, p.rejected_ids, p.rejected_mask, p.weight)).encode())
    return h.hexdigest()


class PairBatches:
    """The Trainer's BatchSource for preference pairs: B pairs per micro-batch, seeded and resumable.

    `ref_logps` (N, 2), when given, are the reference sums of every pair (chosen, rejected),
    computed once before training; each batch carries its rows.

    The order, the torchrun sharding (`shard=(rank, size)`) and the resume fingerprint are the
    shared `EpochWalk`.
    """

    def __init__(
        self,
        pairs: list[RenderedPair],
        batch_size: int,
        seed: int,
        ref_logps: torch.Tensor | None = None,
        pad_id: int = PAD_ID,
        shard: tuple[int, int] = (0, 1),
    ):
        if ref_logps is not None and tuple(ref_logps.shape) != (len(pairs), 2):
            raise ValueError(f"ref_logps has shape {tuple(ref_logps.shape)}, expected ({len(pairs)}, 2)")
        self.pairs, self.batch_size, self.pad_id, self.ref_logps = pairs, batch_size, pad_id, ref_logps
        self.shard = shard  # the Trainer checks it against the torchrun world
        self.walk = EpochWalk(
            len(pairs), batch_size, seed, lambda: pairs_fingerprint(pairs)[:16], shard, what="preference pairs"
        )

    def next_batch(self) -> PairBatch:
        index = self.walk.take()
        batch = collate_pairs([self.pairs[i] for i in index], self.pad_id)
        batch["index"] = torch.tensor(index)
        if self.ref_logps is not None:
            batch["ref_logps"] = self.ref_logps[index]
        return batch

    def fingerprint(self) -> str:
        return self.walk.fingerprint()

    def consumed(self) -> list[int]:
        return self.walk.consumed()

    def state_dict(self) -> dict:
        return self.walk.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.walk.load_state_dict(state)
