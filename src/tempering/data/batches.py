"""Deterministic, resumable batching of rendered examples, with padding or packing.

`ExampleOrder` walks a seeded permutation per epoch and saves its cursor, so a resumed
run sees exactly the batches an uninterrupted one would. Packing puts a batch's
conversations into rows of at most `max_length` with the least padding (`plan_rows`) and restarts
`position_ids` at every conversation: Hugging Face models turn restarted positions into a
block-diagonal causal mask, so no token attends across conversations. The first token of
every packed conversation is never a target, so no conversation predicts another's start.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import torch

from tempering.batches import SFTBatch
from tempering.data.padding import right_pad
from tempering.data.render import IGNORE, RenderedExample
from tempering.errors import UserError


class ExampleOrder:
    """A seeded permutation of range(n) per epoch, consumed `k` at a time."""

    def __init__(self, n: int, seed: int):
        if n == 0:
            raise UserError("no training examples")
        self.n, self.seed = n, seed
        self.epoch, self.cursor = 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.n, generator=gen).tolist()

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.cursor == self.n:
                self.epoch, self.cursor = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            step = min(k - len(out), self.n - self.cursor)
            out += self._perm[self.cursor : self.cursor + step]
            self.cursor += step
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor, "n": self.n, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        for key in ("n", "seed"):
            if state[key] != getattr(self, key):
                raise UserError(
                    f"data order changed since the checkpoint ({key}: {state[key]} -> {getattr(self, key)})"
                )
        self.epoch, self.cursor = state["epoch"], state["cursor"]
        self._perm = self._permutation(self.epoch)


class EpochWalk:
    """The one epoch walk of every training batch source: a seeded order per epoch (`ExampleOrder`),
    this rank's stride of every global micro-batch, and a fingerprint of the items saved with the cursor.

    `shard=(rank, size)`: under torchrun every rank walks the same global order and keeps every
    `size`-th item of each micro-batch from its `rank`, so `batch_size` is the global micro-batch
    and the cursor (the state) is the same on every rank. Resuming on items whose fingerprint
    differs is an error naming `what`.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        seed: int,
        fingerprint: Callable[[], str],
        shard: tuple[int, int] = (0, 1),
        what: str = "training data",
    ):
        if batch_size % shard[1]:
            raise UserError(
                f"train.batch_size {batch_size} is the global batch and must be a multiple of the "
                f"{shard[1]} processes (each takes batch_size / {shard[1]} per micro-batch)"
            )
        self.batch_size, self.shard, self.what = batch_size, shard, what
        self.order = ExampleOrder(n, seed)
        self._hash, self._fingerprint = fingerprint, None
        self._drawn: list[int] = []

    def take(self) -> list[int]:
        """The indices of this rank's share of the next global micro-batch."""
        rank, size = self.shard
        drawn = self.order.take(self.batch_size)
        self._drawn += drawn
        return drawn[rank::size]

    def consumed(self) -> list[int]:
        """The global micro-batches' indices drawn since the last call, in order (every rank's share)."""
        out, self._drawn = self._drawn, []
        return out

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._hash()
        return self._fingerprint

    @property
    def epochs(self) -> float:
        """Epochs walked so far (fractional)."""
        return self.order.epoch + self.order.cursor / self.order.n

    def state_dict(self) -> dict:
        return {**self.order.state_dict(), "fingerprint": self.fingerprint()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("fingerprint") != self.fingerprint():
            raise UserError(
                f"{self.what} changed since the checkpoint (token fingerprint differs); use a new run name to start over"
            )
        self.order.load_state_dict(state)


def pad_batch(examples: list[RenderedExample], pad_id: int) -> SFTBatch:
    """Right-padded (B, T) batch with a 2D attention mask; examples with images
    (`VisionExample`) add their pixel inputs, concatenated along dim 0 in row order."""
    ids, mask = right_pad([e.input_ids for e in examples], pad_id)
    labels, _ = right_pad([e.labels for e in examples], IGNORE)
    batch: SFTBatch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    pixels = [p for e in examples if (p := getattr(e, "pixels", None))]  # `VisionExample`s
    for key in pixels[0] if pixels else ():
        batch[key] = torch.cat([p[key] for p in pixels])  # type: ignore[literal-required]
    return batch


def pack_rows(lengths: list[int], max_length: int) -> list[list[int]]:
    """First-fit decreasing: indices of `lengths` grouped into rows of <= max_length."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if lengths[i] > max_length:
            raise ValueError(f"example of {lengths[i]} tokens exceeds max_length {max_length}")
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(max_length - lengths[i])
    return rows


def plan_rows(lengths: list[int], max_length: int, stride: int = 16) -> list[list[int]]:
    """Rows for one batch with the fewest padded slots (rows x widest row).

    Packing at the full `max_length` leaves the last row half empty and every row is
    padded to the widest; trying first-fit decreasing at each width from the longest
    example up to `max_length` and keeping the cheapest cut the padding of a batch of 8
    chat examples from ~20% to a few percent.
    """
    widths = sorted(set(range(max(lengths), max_length, stride)) | {max_length})
    cuts = (pack_rows(lengths, width) for width in widths)
    return min(cuts, key=lambda rows: len(rows) * max(sum(lengths[i] for i in row) for row in rows))  # first cheapest


def pack_batch(examples: list[RenderedExample], max_length: int, pad_id: int) -> SFTBatch:
    """Packed (R, T) batch: `position_ids` restart per conversation; no attention mask.

    Row padding forms its own position segment with IGNORE labels, so it is never
    attended to by real tokens and never a target.
    """
    if any(getattr(e, "pixels", None) for e in examples):
        raise UserError("examples with images are not packed (set data.packing: false)")
    rows = plan_rows([len(e.input_ids) for e in examples], max_length)
    width = max(sum(len(examples[i].input_ids) for i in row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE)
    positions = torch.zeros_like(ids)
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            e, n = examples[i], len(examples[i].input_ids)
            ids[r, at : at + n] = torch.tensor(e.input_ids)
            labels[r, at : at + n] = torch.tensor(e.labels)
            labels[r, at] = IGNORE
            positions[r, at : at + n] = torch.arange(n)
            at += n
        positions[r, at:] = torch.arange(width - at)
    return {"input_ids": ids, "labels": labels, "position_ids": positions}


class SFTBatches:
    """Micro-batches of `batch_size` conversations in a resumable order (`EpochWalk`: under
    torchrun, `shard=(rank, size)` gives each rank its stride of every global micro-batch)."""

    def __init__(
        self,
        examples: list[RenderedExample],
        batch_size: int,
        max_length: int,
        pad_id: int,
        packing: bool,
        seed: int,
        shard: tuple[int, int] = (0, 1),
    ):
        self.examples, self.batch_size, self.shard = examples, batch_size, shard
        self.max_length, self.pad_id, self.packing = max_length, pad_id, packing
        self.walk = EpochWalk(len(examples), batch_size, seed, self._tokens_hash, shard)

    def next_batch(self) -> SFTBatch:
        chosen = [self.examples[i] for i in self.walk.take()]
        if self.packing:
            batch = pack_batch(chosen, self.max_length, self.pad_id)
        else:
            batch = pad_batch(chosen, self.pad_id)
        batch["n_real_tokens"] = sum(len(e.input_ids) for e in chosen)
        return batch

    def consumed(self) -> list[int]:
        return self.walk.consumed()

    def _tokens_hash(self) -> str:
        h = hashlib.sha256()
        for e in self.examples:
            h.update(repr((e.input_ids, e.labels)).encode())
        return h.hexdigest()[:16]

    def fingerprint(self) -> str:
        """Hash of the examples' tokens and labels: resuming on different data is an error."""
        return self.walk.fingerprint()

    def state_dict(self) -> dict:
        return self.walk.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.walk.load_state_dict(state)
