"""Catch a host tensor meeting an accelerator model on a CPU-only machine.

`DeviceMixCheck` is a `TorchFunctionMode` that pretends the model lives on an accelerator:
it tags the model's parameters and buffers "accelerator", and follows the tag through every
torch call made while it is active:

* a factory call (`torch.tensor`, `zeros`, `arange`, ...) gives an accelerator tensor only
  when it is told the device of an accelerator tensor (`device=t.device`) or a device object
  made in code (the model's device, accelerate's); without `device=`, with the device of a host
  tensor, or with the literal string "cpu", it gives a host tensor, as on a GPU;
* `t.to(device)` / `t.to(other)` / `t.cuda()` move the tag; `.cpu()`, `.numpy()`, `.to("cpu")`
  make a host tensor; a dtype-only `.to` and `*_like` / `new_*` keep the input's tag;
* every other op's output is an accelerator tensor when any input is one.

An op whose inputs mix accelerator tensors with host tensors of one element or more fails
the way CUDA does ("Expected all tensors to be on the same device"). As on CUDA, 0-dim host
tensors (scalars) may meet accelerator tensors, host index tensors may index them, and
`copy_` may copy across. It also counts the host syncs an accelerator would take
(`.item()`, `.tolist()`, `bool/float/int(t)`, `.cpu()`, `.numpy()` of an accelerator tensor),
by the line of `tempering` code that asked.

Limits: a mode is per thread (work done in another thread is not followed); a `.to(d)` that
is a no-op here keeps the same tensor object, so the mode hands back a clone when it moves
the tag, as a real device move would.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

TAG = "_tempering_on_accelerator"

_SYNCS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"}
_TO_HOST = {"cpu", "numpy", "pin_memory"}
_TO_ACCEL = {"cuda"}
_NO_CHECK = {"copy_", "to", "__get__", "__set__", "__repr__", "__format__", "__reduce_ex__", "__deepcopy__"}
_INDEXING = {"__getitem__", "index_put_", "index_put"}


class DeviceMixError(RuntimeError):
    """An op met tensors on two devices (on CUDA: 'Expected all tensors to be on the same device')."""


def on_accelerator(t: torch.Tensor) -> bool:
    """Whether the check regards `t` as living where the model is (parameters always do)."""
    return bool(getattr(t, TAG, False)) or isinstance(t, torch.nn.Parameter)


def _tag(value: Any, accel: bool) -> None:
    for t in tree_leaves(value):
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, TAG, accel)
            except (AttributeError, RuntimeError):  # a tensor type without a __dict__
                pass


# A tensor's `.device`, read under the check, says where it lives by its index: the model's
# device reads as cpu:0, the host as cpu:1 (both are the CPU to torch), so `device=t.device`
# places like `t`. A device object made by code (`torch.device("cpu")`, accelerate's) is the model's.
ACCEL, HOST = torch.device("cpu", 0), torch.device("cpu", 1)
_DEVICE_GETTER = torch.Tensor.device.__get__  # pyright: ignore[reportAttributeAccessIssue]


def _device_arg(value: Any) -> bool | None:
    """True: an accelerator placement; False: the host; None: not a device argument."""
    if isinstance(value, torch.device):
        return value != HOST
    if isinstance(value, str):
        if value == "cpu":
            return False
        if value.split(":")[0] in ("cuda", "meta", "xpu", "mps"):
            return True
    return None


def _caller() -> str:
    """file:line of the innermost `tempering` frame that made the call."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/tempering/" in name and "/tests/" not in name:
            return f"{name.split('/tempering/', 1)[1]}:{frame.f_lineno}"
        frame = frame.f_back
    return "<outside tempering>"


class DeviceMixCheck(TorchFunctionMode):
    """Run code under this mode with `model` regarded as on an accelerator (see the module doc)."""

    def __init__(self, *models: Any):
        super().__init__()
        for model in models:
            _tag(list(model.parameters()) + list(model.buffers()), True)
        self.syncs: collections.Counter[tuple[str, str]] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE_GETTER:
            return ACCEL if on_accelerator(args[0]) else HOST
        name = getattr(func, "__name__", "")
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        accel_in = any(on_accelerator(t) for t in tensors)
        if name in _SYNCS and args and isinstance(args[0], torch.Tensor) and on_accelerator(args[0]):
            self.syncs[(name, _caller())] += 1
        if name == "__setitem__":  # basic or advanced assignment copies across devices (a sync to the host)
            if not on_accelerator(args[0]) and isinstance(args[2], torch.Tensor) and on_accelerator(args[2]):
                self.syncs[(name, _caller())] += 1
            return func(*args, **kwargs)
        if name not in _NO_CHECK and accel_in:
            self._check_mix(name, args, kwargs)
        out = func(*args, **kwargs)
        accel_out = self._placement(name, args, kwargs, accel_in)
        if accel_out is None:
            return out
        if name in ("to", "cuda") and args and out is args[0] and on_accelerator(out) != accel_out:
            out = out.clone()  # a real move makes a new tensor; the source keeps its device
        _tag(out, accel_out)
        return out

    def _check_mix(self, name: str, args: tuple, kwargs: dict) -> None:
        operands = (args[:1] + args[2:]) if name in _INDEXING else args
        host = [
            t
            for t in tree_leaves((operands, kwargs))
            if isinstance(t, torch.Tensor) and not on_accelerator(t) and t.dim() > 0
        ]
        if host:
            shapes = ", ".join(str(tuple(t.shape)) for t in host[:3])
            raise DeviceMixError(
                f"{name} at {_caller()}: host tensor(s) of shape {shapes} meet tensors on the model's "
                "device (Expected all tensors to be on the same device)"
            )

    def _placement(self, name: str, args: tuple, kwargs: dict, accel_in: bool) -> bool | None:
        """Where the output lives (True: the accelerator); None: not a tensor-making call to tag."""
        if name in _TO_HOST:
            return False
        if name in _TO_ACCEL:
            return True
        if name == "copy_":
            return on_accelerator(args[0])
        if "device" in kwargs and kwargs["device"] is not None:
            placed = _device_arg(kwargs["device"])
            return accel_in if placed is None else placed
        if name == "to":
            for value in args[1:]:
                if isinstance(value, torch.Tensor):
                    return on_accelerator(value)
                placed = _device_arg(value)
                if placed is not None:
                    return placed
            return accel_in
        return accel_in


def assert_no_device_mix(run, *models: Any) -> DeviceMixCheck:
    """Run `run()` under a `DeviceMixCheck` of `models`; a device mix raises `DeviceMixError`."""
    check = DeviceMixCheck(*models)
    with check:
        run()
    return check
