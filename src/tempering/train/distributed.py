"""Data-parallel training across processes: `torchrun --standalone --nproc_per_node N temper sft ...`.

The world (rank, size) comes from torchrun's environment. A process torchrun started joins the
process group even alone (`--nproc_per_node 1`: the collectives run, over a group of one, so
one GPU exercises the NCCL path); a process started without torchrun is a world of one and
every helper here is then a no-op, so the Trainer has a single code path. The backend is
gloo on CPU and NCCL on GPU.

What makes N processes train like one (docs/scale.md):
- every rank walks the same global data order and keeps its stride of each micro-batch
  (`SFTBatches(shard=...)`), so the global batch and the data cursor are the same as on one process and a
  checkpoint's cursor is valid on every rank;
- the loss is normalised by the target units of the whole optimizer step summed over all
  ranks, and the gradients are *summed* across ranks after the accumulation
  (`all_reduce_grads`): the update equals the single-process one up to float summation order;
- losses and gradient norms are therefore identical on all ranks, so the anomaly guard takes
  the same decision everywhere; a non-finite loss on any rank is made known to all
  (`any_rank`) before any gradient is reduced or applied;
- rank 0 alone writes checkpoints (with every rank's RNG state), metrics and the registry;
  the others wait at a barrier before reading a checkpoint.

Every collective has a deadline (`train.collective_timeout_s`, the process group's timeout): a
rank whose peer hangs stops with one `WorkerStuck` line naming the collective, its rank and the
step (the Trainer adds it), and one whose peer died (its connection closed) with a `WorkerDied`
line, rather than gloo's or NCCL's own text or a wait of the backend's default 30 minutes;
torchrun then stops the other ranks, and the last checkpoint resumes the run exactly.

Gradients are reduced after the backward passes rather than through DDP's hooks because
the objectives call the decoder directly (head-only log-probs), which a
`DistributedDataParallel` wrapper's forward would never see.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable, Iterator

from tempering import faults
from tempering.deadlines import WorkerDied, WorkerStuck
from tempering.errors import UserError

BUCKET_ELEMENTS = 1 << 22  # 16 MB of fp32 per all-reduce
COLLECTIVE_TIMEOUT_S = 600.0
"""Default seconds a rank waits in a collective for its peers (`train.collective_timeout_s`)."""
FAULT_POINT = "collective"
"""The fault battery's point at each collective of a rank (tempering/faults.py)."""
_timeout_s = COLLECTIVE_TIMEOUT_S


class WorldSizeChanged(UserError):
    """Resuming a checkpoint written by a different number of processes."""


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def main(self) -> bool:
        """True on the process that writes checkpoints, metrics and the registry."""
        return self.rank == 0


def world() -> World:
    """This process's place in the torchrun world (rank 0 of 1 outside torchrun)."""
    return World(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))


def init(timeout_s: float = COLLECTIVE_TIMEOUT_S) -> World:
    """Join the process group torchrun describes (once; also at world size 1 under torchrun), its
    collectives bounded by `timeout_s`; returns the world."""
    global _timeout_s
    w = world()
    if w.size > 1 or "TORCHELASTIC_RUN_ID" in os.environ:  # set by torchrun for every process it starts
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            if torch.cuda.is_available():  # cuda-path: nccl
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            backend = "nccl" if torch.cuda.is_available() else "gloo"  # cuda-path: nccl
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
            _timeout_s = timeout_s
    return w


@contextmanager
def _collective(doing: str) -> Iterator[None]:
    """Run a collective; a peer that never joins it, or whose connection closed, is one line."""
    faults.point(FAULT_POINT)
    try:
        yield
    except RuntimeError as exc:  # torch.distributed.DistBackendError is one
        w, text = world(), str(exc).lower()
        where = f"{doing} (rank {w.rank} of {w.size})"
        if "timed out" in text or "timeout" in text:
            raise WorkerStuck("torchrun peer rank", where, _timeout_s, _timeout_s) from exc
        if any(s in text for s in ("connection closed", "closed by peer", "connection reset", "broken pipe")):
            raise WorkerDied(
                "torchrun peer rank", where, "its connection closed (a peer process died; torchrun stops the others)"
            ) from exc
        raise


def grouped() -> bool:
    """Whether this process is in a process group (torchrun): the helpers then run their collectives."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _device() -> Any:
    import torch

    if torch.cuda.is_available():  # cuda-path: nccl (NCCL reduces tensors on the GPU)
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_over_ranks(values: list[float]) -> list[float]:
    """Element-wise sum of `values` over all ranks (float64)."""
    if not grouped():
        return list(values)
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=_device())
    with _collective("summing step figures"):
        dist.all_reduce(t)
    return t.tolist()


def any_rank(flag: bool) -> bool:
    """True on every rank when `flag` is true on at least one."""
    return sum_over_ranks([float(flag)])[0] > 0


def all_reduce_grads(params: Iterable[Any]) -> None:
    """Sum the gradients of `params` over all ranks, in buckets (a missing grad counts as zero)."""
    if not grouped():
        return
    import torch
    import torch.distributed as dist

    params = list(params)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    start = 0
    while start < len(params):
        bucket, n = [], 0
        while start < len(params) and (not bucket or n + params[start].numel() <= BUCKET_ELEMENTS):
            bucket.append(params[start])
            n += params[start].numel()
            start += 1
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])
        with _collective("all-reducing gradients"):
            dist.all_reduce(flat)
        at = 0
        for p in bucket:
            p.grad.copy_(flat[at : at + p.numel()].view_as(p.grad))
            at += p.numel()


def broadcast(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (a small picklable object)."""
    if not grouped():
        return obj
    import torch.distributed as dist

    box = [obj]
    with _collective("broadcasting from rank 0"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: Any) -> list[Any] | None:
    """Every rank's `obj`, as a list on rank 0 (None elsewhere)."""
    w = world()
    if not grouped():
        return [obj]
    import torch.distributed as dist

    out = [None] * w.size if w.main else None
    with _collective("gathering to rank 0"):
        dist.gather_object(obj, out, dst=0)
    return out


def barrier() -> None:
    """Wait for every rank."""
    if grouped():
        import torch.distributed as dist

        with _collective("waiting at a barrier"):
            dist.barrier()


def check_world_size(saved: int, w: World) -> None:
    """Refuse to resume on another number of processes than the checkpoint was written with."""
    if saved != w.size:
        raise WorldSizeChanged(
            f"this run's checkpoints were written by {saved} process(es) and this resume runs {w.size}; "
            f"resume with `--nproc_per_node {saved}` (the float summation order over ranks is part of an "
            "exact resume), or start a new run with another --name"
        )
