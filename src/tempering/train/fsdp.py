"""Fully sharded data parallel training (`train.fsdp`): FSDP2's `fully_shard` over the torchrun world.

Each of the N ranks keeps 1/N of every parameter, of its gradient and of its AdamW state; a
unit's parameters are all-gathered just before it runs and freed after (re-gathered for the
backward pass). Everything else is the data-parallel path of `train/distributed.py`: the same
global batch split over ranks, the loss normalised over the whole step's units, gradients
*summed* over ranks (the reduce-scatter's divide factor is 1), so an update equals the
single-process one up to float summation order.

Units: each decoder layer; the input embeddings with the output head (one unit, so tied
weights stay one parameter; the objectives call the head after the decoder returns, for
head-only log-probs, and FSDP gathers a grouped unit whenever one of its modules runs); the
decoder itself as the root (its final norm and whatever else it holds directly).

Checkpoints stay plain: every rank takes part in gathering full tensors, rank 0 writes them in
the single-process layout (weights by name, the optimizer's state by parameter index), and a
resume slices each rank's shard back out of the full tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from tempering.errors import UserError


def shard_model(model: Any) -> None:
    """Apply `fully_shard` to `model`'s units in place (see the module docstring).

    Raises:
        ValueError: a trainable parameter lies outside the decoder and the output head.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    decoder, head, embed = model.get_decoder(), model.get_output_embeddings(), model.get_input_embeddings()
    covered = {id(p) for module in (decoder, head) for p in module.parameters()}
    outside = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in covered]
    if outside:
        raise UserError(f"train.fsdp: parameters outside the decoder and its output head: {outside[:3]}")
    for layer in decoder.layers:
        fully_shard(layer)
    fully_shard([embed, head])
    fully_shard(decoder)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # a sum over ranks, as all_reduce_grads does
            module.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no PREMUL_SUM)


def full_tensor(t: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def full_weights(named: list[tuple[str, torch.nn.Parameter]], main: bool) -> dict[str, torch.Tensor]:
    """Full CPU copies of `named` on the main rank ({} elsewhere); every rank must call it."""
    out = {}
    for name, p in named:
        full = full_tensor(p.detach())
        if main:
            out[name] = full.cpu()
    return out


def full_state_dict(model: Any, main: bool) -> dict[str, torch.Tensor]:
    """`model.state_dict()` with full tensors on the main rank ({} elsewhere), tied entries kept
    tied (one gather per tensor); every rank must call it."""
    gathered: dict[int, torch.Tensor] = {}
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in gathered:
            gathered[id(t)] = full_tensor(t.detach()).cpu()
        if main:
            out[name] = gathered[id(t)]
    return out


def full_optimizer_state(optimizer: Any, main: bool) -> dict:
    """The optimizer's `state_dict()` with full tensors, on the main rank ({} elsewhere)."""
    state = optimizer.state_dict()
    full = {
        i: {k: full_tensor(v).cpu() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
        for i, s in state["state"].items()
    }
    return {**state, "state": full} if main else {}


def _shard_like(full: torch.Tensor, param: Any) -> Any:
    """This rank's shard of `full`, laid out as `param` is (no communication)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(param, DTensor):
        return full.to(param.device)
    return distribute_tensor(full.to(param.device), param.device_mesh, param.placements, src_data_rank=None)


def load_full_weights(named: list[tuple[str, torch.nn.Parameter]], weights: dict[str, torch.Tensor]) -> None:
    """Copy full tensors into the (sharded) parameters `named`."""
    with torch.no_grad():
        for name, p in named:
            p.copy_(_shard_like(weights[name], p))


def load_full_optimizer_state(optimizer: Any, state: dict, params: list[Any]) -> None:
    """Load an optimizer state of full tensors, sharded like `params` (the optimizer's, in order)."""
    sharded = {
        i: {
            k: _shard_like(v, params[int(i)]) if k != "step" and isinstance(v, torch.Tensor) else v
            for k, v in s.items()
        }
        for i, s in state["state"].items()
    }
    optimizer.load_state_dict({**state, "state": sharded})
