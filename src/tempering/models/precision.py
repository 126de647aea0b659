"""Pick the training/generation precision from what the hardware runs fast.

bf16 autocast is the default where bf16 matmuls are native: a GPU with bf16, or a CPU
with AMX / AVX512-BF16 (measured ~600 vs ~125 GFLOP/s fp32 on an AMX host). On a CPU
without them (e.g. AVX2-only EPYC) PyTorch emulates bf16 and a 2048^2 matmul ran at
0.2 GFLOP/s against 45 in fp32, so "auto" picks fp32 there instead of silently crawling.
Whether bf16 is native is decided by a probe (`models/cpu_features.py`), so
`TEMPERING_CPU_FEATURES=avx2` makes "auto" answer as an AVX2-only host does.

Precision is resolved once, where a run or an engine is built (`resolve_precision`); what
runs under it (`autocast`) takes only the resolved "bf16" or "fp32".
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from tempering.errors import UserError
from tempering.models.cpu_features import refusal, supports

PRECISIONS = ("auto", "bf16", "fp32")


def cpu_has_native_bf16() -> bool:
    """AMX or AVX512-BF16, and a bf16 matmul probed once (`cpu_features`: masks and VMs)."""
    return supports("native_bf16")


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI or AVX-VNNI, and fbgemm's 8-bit activations probed once for int32 sums."""
    return supports("vnni_int8")


def resolve_precision(precision: str) -> str:
    """ "auto" -> "bf16" where bf16 is native on the device in use, else "fp32".

    Raises:
        UserError: for anything but auto, bf16 or fp32 (naming the value).
    """
    if precision not in PRECISIONS:
        raise UserError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if torch.cuda.is_available():  # cuda-path: bf16-cuda
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def auto_reason(precision: str) -> str:
    """Why a `precision` setting runs as it does, for the run's first line: "" unless "auto"
    fell back to fp32 on a CPU, then the probe's reason (e.g. the CPU lacks AVX512-BF16)."""
    if precision != "auto" or torch.cuda.is_available() or cpu_has_native_bf16():  # cuda-path: bf16-cuda
        return ""
    return f" (auto: {refusal('native_bf16')})"


def default_device() -> torch.device:
    """Where a model loaded for sampling computes (eval, serve, chat, Ray engine replicas): the
    current CUDA GPU when torch sees one, else the CPU. The Trainer places its model itself."""
    if torch.cuda.is_available():  # cuda-path: default-device
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(precision: str, device: torch.device, cache: bool = True) -> Any:
    """bf16 autocast on `device` for "bf16", nothing for "fp32" (a resolved precision only).
    `cache=False` casts weights afresh each call: a captured CUDA graph must not read casts
    that autocast frees when its context exits."""
    if precision == "bf16":  # cuda-path: bf16-cuda (on a GPU device: CUDA autocast)
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    if precision == "fp32":
        return nullcontext()
    raise ValueError(
        f"autocast needs a resolved precision (bf16 or fp32), got {precision!r}; "
        "call resolve_precision once where the run is built"
    )
