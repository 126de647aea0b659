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
from typing import Any

import torch

from tempering.data.render import IGNORE, RenderedExample


class ExampleOrder:
    """A seeded permutation of range(n) per epoch, consumed `k` at a time."""

    def __init__(self, n: int, seed: int):
        if n == 0:
            raise ValueError("no training examples")
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
                raise ValueError(
                    f"data order changed since the checkpoint ({key}: {state[key]} -> {getattr(self, key)})"
                )
        self.epoch, self.cursor = state["epoch"], state["cursor"]
        self._perm = self._permutation(self.epoch)


def pad_batch(examples: list[RenderedExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) batch with a 2D attention mask."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE)
    mask = torch.zeros_like(ids)
    for r, e in enumerate(examples):
        n = len(e.input_ids)
        ids[r, :n] = torch.tensor(e.input_ids)
        labels[r, :n] = torch.tensor(e.labels)
        mask[r, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


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
    best: tuple[int, list[list[int]]] | None = None
    for width in sorted(set(range(max(lengths), max_length, stride)) | {max_length}):
        rows = pack_rows(lengths, width)
        cost = len(rows) * max(sum(lengths[i] for i in row) for row in rows)
        if best is None or cost < best[0]:
            best = (cost, rows)
    return best[1]


def pack_batch(examples: list[RenderedExample], max_length: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Packed (R, T) batch: `position_ids` restart per conversation; no attention mask.

    Row padding forms its own position segment with IGNORE labels, so it is never
    attended to by real tokens and never a target.
    """
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
    """Micro-batches of `batch_size` conversations in a resumable order.

    `shard=(rank, size)`: under torchrun every rank walks the same global order and keeps
    every `size`-th conversation of each micro-batch from its `rank`, so `batch_size` is the
    global micro-batch and the cursor (the state) is the same on every rank.
    """

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
        if batch_size % shard[1]:
            raise ValueError(
                f"train.batch_size {batch_size} is the global batch and must be a multiple of the "
                f"{shard[1]} processes (each takes batch_size / {shard[1]} conversations per micro-batch)"
            )
        self.examples, self.batch_size, self.shard = examples, batch_size, shard
        self.max_length, self.pad_id, self.packing = max_length, pad_id, packing
        self.order = ExampleOrder(len(examples), seed)
        self._fingerprint: str | None = None

    def next_batch(self) -> dict[str, Any]:
        rank, size = self.shard
        chosen = [self.examples[i] for i in self.order.take(self.batch_size)[rank::size]]
        if self.packing:
            batch = pack_batch(chosen, self.max_length, self.pad_id)
        else:
            batch = pad_batch(chosen, self.pad_id)
        batch["n_real_tokens"] = sum(len(e.input_ids) for e in chosen)
        return batch

    def fingerprint(self) -> str:
        """Hash of the examples' tokens and labels: resuming on different data is an error."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for e in self.examples:
                h.update(repr((e.input_ids, e.labels)).encode())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def state_dict(self) -> dict:
        return {**self.order.state_dict(), "fingerprint": self.fingerprint()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("fingerprint") != self.fingerprint():
            raise ValueError(
                "training data changed since the checkpoint (token fingerprint differs); "
                "use a new run name to start over"
            )
        self.order.load_state_dict(state)
