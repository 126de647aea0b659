"""Context parallelism (`train.context_parallel: N`): each of N torchrun processes holds 1/N of every row.

A row of T tokens (right-padded to a multiple of 2N) is cut into 2N equal chunks and rank r keeps
chunks r and 2N-1-r (the "zigzag" layout): under a causal mask early chunks attend to little and
late chunks to much, so pairing one of each gives every rank the same attention work. Positions
stay global (`position_ids` are the chunks' places in the whole row), so RoPE sees what one
process would see.

Each attention layer all-gathers the keys and values of every rank (`gather_sequence`: the
gather forward, the sum over ranks of the gradients backward, i.e. a reduce-scatter), puts them
in row order, and attends each local chunk to the keys up to its own end under a causal mask
over the global positions (`zigzag_mask`; the masks are made once per batch and shared by the
layers, C x (2N+1)C in all for chunks of C tokens, against C x 4NC for one mask over the row). It plugs into transformers as a registered attention function
(`AttentionInterface`), so no model code is copied; batches that carry no `sequence_shard`
(the held-out measure on whole rows) run plain SDPA through the same function.

What makes N processes train like one: every rank reads the same global micro-batch (its
`SFTBatches` is not sharded) and keeps its zigzag shard of each row, with each position's next
token already beside it (`targets`: a shift across a chunk boundary would need the neighbour's
token); the Trainer's data-parallel arithmetic then holds unchanged: the step's normaliser is
the target count summed over ranks, each rank's loss is the sum over its own targets, and the
gradients are summed over ranks (`distributed.all_reduce_grads`), so the update equals the
single-process one up to float summation order (docs/scale.md, Context parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tempering.batches import PIXEL_KEYS, SequenceShardBatch, SFTBatch
from tempering.errors import UserError
from tempering.types import IGNORE

ATTENTION = "tempering_context_parallel"
"""The name the split attention is registered under (`AttentionInterface`, `AttentionMaskInterface`)."""

UNSUPPORTED_ATTENTION = ("sliding_window", "softcap", "s_aux")
"""Attention variants the split attention would silently drop: a model using one is refused."""


def zigzag_indices(length: int, ranks: int, rank: int) -> torch.Tensor:
    """The positions rank `rank` keeps of a row of `length` (a multiple of 2 x `ranks`): chunks
    `rank` and 2 x `ranks` - 1 - `rank` of 2 x `ranks` equal chunks, in that order."""
    if length % (2 * ranks):
        raise ValueError(f"a row of {length} tokens does not split into {2 * ranks} equal chunks")
    c = length // (2 * ranks)
    early, late = rank * c, (2 * ranks - 1 - rank) * c
    return torch.cat([torch.arange(early, early + c), torch.arange(late, late + c)])


def zigzag_split(x: torch.Tensor, ranks: int, rank: int, dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s zigzag shard of `x` along `dim`."""
    return x.index_select(dim, zigzag_indices(x.shape[dim], ranks, rank).to(x.device))


def zigzag_unsplit(shards: list[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The whole tensor back from every rank's shard (in rank order): the inverse of `zigzag_split`."""
    ranks = len(shards)
    joined = torch.cat(shards, dim)
    order = torch.cat([zigzag_indices(joined.shape[dim], ranks, r) for r in range(ranks)])
    return joined.index_select(dim, torch.argsort(order).to(joined.device))


def zigzag_mask(query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """(Tq, Tk) bool, True where a query may attend a key: causal over global positions."""
    return key_positions[None, :] <= query_positions[:, None]


@dataclass(frozen=True)
class SequenceShard:
    """Where a rank's tokens lie in the whole row: what the split attention needs beside its inputs."""

    ranks: int
    rank: int
    length: int
    """The padded row length (a multiple of 2 x `ranks`)."""
    _masks: dict = field(default_factory=dict, compare=False, repr=False)

    def query_positions(self) -> torch.Tensor:
        return zigzag_indices(self.length, self.ranks, self.rank)

    def key_positions(self) -> torch.Tensor:
        """The positions of the gathered keys: every rank's shard, in rank order."""
        return torch.cat([zigzag_indices(self.length, self.ranks, r) for r in range(self.ranks)])

    def chunk_masks(self, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
        """Per local chunk, its additive causal mask over the keys before its end, in row order:
        (C, end) with 0 where a query may attend and -inf elsewhere. Made once per batch and
        device and shared by every layer (their backward passes keep one copy)."""
        if (dtype, device) not in self._masks:
            queries = self.query_positions().view(2, -1)
            masks = []
            for chunk in queries:
                allowed = zigzag_mask(chunk, torch.arange(int(chunk[-1]) + 1))
                masks.append(torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf")).to(device))
            self._masks[(dtype, device)] = masks
        return self._masks[(dtype, device)]


def shard_batch(batch: SFTBatch, ranks: int, rank: int) -> SequenceShardBatch:
    """Rank `rank`'s zigzag shard of every row of a padded SFT batch.

    Rows are right-padded to a multiple of 2 x `ranks` (padding comes after every real token, so
    a causal mask keeps it from real queries, and it is never a target); `targets[t]` is the
    token after position t (IGNORE where it takes no loss), cut with the inputs.
    """
    if any(key in batch for key in PIXEL_KEYS):
        raise UserError(
            "train.context_parallel: rows with images are not split over processes (the image "
            "features would have to be placed across ranks); train them without context parallelism"
        )
    if "position_ids" in batch:  # the config refuses packing
        raise ValueError("a packed batch cannot be split by context parallelism")
    ids, labels = batch["input_ids"], batch["labels"]
    real = batch.get("attention_mask", torch.ones_like(ids))
    rows, length = ids.shape
    targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE)], dim=1)
    pad = -length % (2 * ranks)
    ids, targets, real = (
        torch.nn.functional.pad(t, (0, pad), value=v) for t, v in ((ids, 0), (targets, IGNORE), (real, 0))
    )
    shard = SequenceShard(ranks, rank, length + pad)
    keep = shard.query_positions()
    return {
        "input_ids": ids[:, keep],
        "position_ids": keep.expand(rows, -1),
        "targets": targets[:, keep],
        "sequence_shard": shard,
        "n_real_tokens": int(real[:, keep].sum()),
    }


class SequenceShards:
    """A batch source whose batches are this rank's zigzag shards of `batches`' (whole, unsharded)
    micro-batches; its cursor, fingerprint and consumed ids are `batches`'."""

    def __init__(self, batches: Any, ranks: int, rank: int):
        self.batches, self.ranks, self.rank = batches, ranks, rank
        self.shard = (rank, ranks)  # what the Trainer checks: each rank holds its share of every batch

    def next_batch(self) -> SequenceShardBatch:
        return shard_batch(self.batches.next_batch(), self.ranks, self.rank)

    def consumed(self) -> list:
        return self.batches.consumed()

    def state_dict(self) -> dict:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state)


class _GatherSequence(torch.autograd.Function):
    """All-gather along `dim` over the process group; backward: the sum over ranks of the whole
    tensor's gradient (every rank's loss reads every rank's keys), then this rank's slice."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, dim: int) -> torch.Tensor:
        import torch.distributed as dist

        ctx.dim = dim
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local.contiguous())
        return torch.cat(parts, dim)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        import torch.distributed as dist

        # a reduce-scatter, as an all-reduce and a slice: gloo has no reduce-scatter
        total = grads[0].clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total)
        return total.chunk(dist.get_world_size(), ctx.dim)[dist.get_rank()], None


def gather_sequence(local: torch.Tensor, dim: int) -> torch.Tensor:
    """Every rank's `local` joined along `dim` in rank order, differentiable (see `_GatherSequence`)."""
    out = _GatherSequence.apply(local, dim)
    assert isinstance(out, torch.Tensor)
    return out


def split_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    sequence_shard: SequenceShard | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The registered attention function: (B, H, Tl, D) local queries against every rank's keys and
    values, causal over global positions; plain SDPA for a batch without a `sequence_shard`.

    The gathered keys are put in row order; each local chunk then attends to the keys up to its
    own end only (`SequenceShard.chunk_masks`), so no (Tl, T) mask and no attention to keys a
    chunk cannot see is computed. The model's own mask (built from the local positions) is unused.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if sequence_shard is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    used = [name for name in UNSUPPORTED_ATTENTION if kwargs.get(name) is not None]
    if used:
        raise UserError(
            f"train.context_parallel: this model's attention uses {used[0]}, which the split attention does not apply"
        )
    # one collective for both (B, Hkv, Tl, D): the ranks' backward passes then meet in the same order
    key, value = gather_sequence(torch.stack([key, value]), dim=3).unbind(0)
    in_row_order = torch.argsort(sequence_shard.key_positions()).to(query.device)
    key, value = key.index_select(2, in_row_order), value.index_select(2, in_row_order)
    masks = sequence_shard.chunk_masks(query.dtype, query.device)
    outputs = [
        torch.nn.functional.scaled_dot_product_attention(
            q,
            key[:, :, : mask.shape[1]],
            value[:, :, : mask.shape[1]],
            attn_mask=mask,
            dropout_p=kwargs.get("dropout", 0.0),
            scale=kwargs.get("scaling"),
            enable_gqa=key.shape[1] != query.shape[1],
        )
        for q, mask in zip(query.chunk(2, dim=2), masks)
    ]
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def register_attention() -> None:
    """Register `split_attention` (with SDPA's mask builder for whole rows) under `ATTENTION`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, split_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def check_world(ranks: int, size: int, under_torchrun: bool) -> None:
    """Refuse a context-parallel size the torchrun world cannot hold (one line)."""
    if not under_torchrun or size == 1:
        raise UserError(
            f"train.context_parallel {ranks} splits each sequence over {ranks} processes and this is one; "
            f"run under `torchrun --nproc_per_node {ranks}` or set train.context_parallel: 1"
        )
    if size % ranks:
        raise UserError(
            f"train.context_parallel {ranks} does not divide the {size} torchrun processes; "
            f"run with --nproc_per_node {ranks}"
        )
    if size != ranks:
        raise UserError(
            f"train.context_parallel {ranks} over {size} processes would combine it with data "
            f"parallelism, which is not supported yet; run with --nproc_per_node {ranks}"
        )


def split_sequences(model: Any, batches: Any, ranks: int) -> SequenceShards:
    """Set `model` to the split attention and return `batches` as this rank's sequence shards.

    Raises:
        UserError: not under torchrun with `ranks` processes, or a mixture-of-experts model.
    """
    import os

    from tempering.models.routing import is_moe
    from tempering.train.distributed import world

    w = world()
    check_world(ranks, w.size, "TORCHELASTIC_RUN_ID" in os.environ)
    if is_moe(model):
        raise UserError(
            "train.context_parallel: mixture-of-experts models are not supported yet (the balance "
            "term and router statistics would cover each process's tokens, not the whole sequence)"
        )
    register_attention()
    model.set_attn_implementation(ATTENTION)
    return SequenceShards(batches, ranks, w.rank)
