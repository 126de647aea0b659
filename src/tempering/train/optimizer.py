"""The optimizer the Trainer steps: AdamW with fp32 or 8-bit states, or plain SGD.

8-bit states come from torchao's low-bit optimizers (`torchao.optim.AdamW8bit`): both Adam
moments are stored as int8 codes with one fp32 scale per block of 256 values (dynamic-tree
quantisation, as in Dettmers et al. 2022), about 2 bytes per parameter instead of 8. The
update itself runs in fp32 inside a `torch.compile`d step, so it runs on a CPU (the first
step of each parameter shape compiles: tens of seconds once). bitsandbytes' 8-bit optimizers
were the other candidate; torchao was chosen because it is plain torch (a tensor subclass over
compiled tensor code), which runs wherever torch and a C compiler do (where inductor's probe
finds no compiler, `models/cpu_features.py`, the step runs eagerly). Tensors with fewer than
4096 values keep fp32 states (torchao's rule): norms and biases are a negligible share.

torchao takes the learning rate as a tensor, so the Trainer sets it through `set_lr`.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable

import torch

from tempering.config import OptimSettings
from tempering.errors import UserError
from tempering.models.cpu_features import supports


def build_optimizer(params: Iterable[torch.nn.Parameter], settings: OptimSettings) -> torch.optim.Optimizer:
    """The optimizer `settings` names over `params` (`name`, `state_bits`)."""
    params = list(params)
    if settings.name == "sgd":
        return torch.optim.SGD(params, lr=settings.lr, weight_decay=settings.weight_decay)
    if settings.state_bits == 8:
        return _adamw_8bit(params, settings)
    return torch.optim.AdamW(params, lr=settings.lr, betas=settings.betas, weight_decay=settings.weight_decay)


def _adamw_8bit(params: list[torch.nn.Parameter], settings: OptimSettings) -> torch.optim.Optimizer:
    try:
        from torchao.optim import AdamW8bit  # pyright: ignore[reportMissingImports]  (optional: extra `memory`)
        from torchao.optim.subclass_8bit import OptimState8bit  # pyright: ignore[reportMissingImports]
    except ImportError as err:
        raise UserError(
            "train.optim.state_bits: 8 needs torchao's low-bit optimizers: pip install 'tempering[memory]'"
        ) from err
    # checkpoints load optimizer.pt with weights_only=True: the state subclass must be allowed
    torch.serialization.add_safe_globals([OptimState8bit])
    opt = AdamW8bit(params, lr=settings.lr, betas=settings.betas, weight_decay=settings.weight_decay)
    if any(p.is_cpu for p in params) and not supports("inductor_cpp"):
        opt.step = _eager(opt.step)  # no C++ compiler here: the same tensor code, uncompiled (slower)
    return opt


def _eager(step: Any) -> Any:
    """`step` with torch.compile's stance forced to eager for its duration."""

    @functools.wraps(step)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("force_eager"):
            return step(*args, **kwargs)

    return run


def set_lr(optimizer: Any, lr: float) -> None:
    """Set every parameter group's learning rate (in place where the optimizer keeps it as a tensor)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def state_bytes(optimizer: Any) -> int:
    """Bytes the optimizer's per-parameter state holds (8-bit codes and their scales included)."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            total += _tensor_bytes(value)
    return total


def _tensor_bytes(value: Any) -> int:
    if not isinstance(value, torch.Tensor):
        return 0
    flatten = getattr(value, "__tensor_flatten__", None)
    if flatten is not None and type(value) is not torch.Tensor and type(value) is not torch.nn.Parameter:
        names, _ = flatten()
        return sum(_tensor_bytes(getattr(value, n)) for n in names)
    return value.numel() * value.element_size()
