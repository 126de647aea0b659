"""Full-vocabulary losses over row chunks: distillation's log-softmaxes without N x V intermediates.

A distillation step scores N positions against a V-wide vocabulary; written plainly, the teacher's
and the student's log-softmax, their exponentials and differences are several (N, V) fp32 tensors,
and autograd keeps them until the backward pass (a 16k-token step of a 49k vocabulary: 3 GiB
each). `by_row_chunks` applies a per-row function to slices of at most `rows` positions; under
autograd each slice is checkpointed (recomputed in the backward pass), so only one slice's
(rows, V) intermediates live at a time, and the result equals the unchunked one (the per-row
arithmetic is the same; only the final sums' order differs).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_BYTES = 1 << 26
"""Bytes of one (rows, V) fp32 intermediate of a chunk (64 MiB): 341 rows of a 49k vocabulary."""


def chunk_rows(vocab: int) -> int:
    """Rows per chunk for a `vocab`-wide row (at least one)."""
    return max(1, CHUNK_BYTES // (4 * vocab))


def by_row_chunks(fn: Callable[..., torch.Tensor], *rows_of: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """`fn(*slices)` over row slices of the (N, ...) tensors `rows_of`, concatenated along rows.

    Args:
        fn: per-row function; its result's first dimension is its slices' rows.
        rows: rows per slice; by default `chunk_rows` of the first tensor's last dimension.
    """
    rows = chunk_rows(rows_of[0].shape[-1]) if rows is None else rows
    tracked = torch.is_grad_enabled() and any(t.requires_grad for t in rows_of)
    parts = [
        checkpoint(fn, *slices, use_reentrant=False) if tracked else fn(*slices)
        for slices in zip(*(t.split(rows) for t in rows_of))
    ]
    return torch.cat(parts) if parts else fn(*rows_of)
