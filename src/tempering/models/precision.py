"""Pick the training/generation precision from what the hardware runs fast.

bf16 autocast is the default where bf16 matmuls are native: a GPU with bf16, or a CPU
with AMX / AVX512-BF16 (measured ~600 vs ~125 GFLOP/s fp32 on an AMX host). On a CPU
without them (e.g. AVX2-only EPYC) PyTorch emulates bf16 and a 2048^2 matmul ran at
0.2 GFLOP/s against 45 in fp32, so "auto" picks fp32 there instead of silently crawling.

Precision is resolved once, where a run or an engine is built (`resolve_precision`); what
runs under it (`autocast`) takes only the resolved "bf16" or "fp32".
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

NATIVE_BF16_CPU_FLAGS = {"amx_bf16", "avx512_bf16"}
VNNI_CPU_FLAGS = {"avx512_vnni", "avx_vnni"}
PRECISIONS = ("auto", "bf16", "fp32")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags from /proc/cpuinfo; None where it cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return frozenset(
        next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    )


def cpu_has_native_bf16() -> bool:
    flags = cpu_flags()
    if flags is None:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return bool(NATIVE_BF16_CPU_FLAGS & flags)


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI or AVX-VNNI (int8 dot products summed in int32); False where flags are unknown."""
    return bool(VNNI_CPU_FLAGS & (cpu_flags() or frozenset()))


def resolve_precision(precision: str) -> str:
    """ "auto" -> "bf16" where bf16 is native on the device in use, else "fp32".

    Raises:
        ValueError: for anything but auto, bf16 or fp32 (naming the value).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if torch.cuda.is_available():  # cuda-path: bf16-cuda
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def default_device() -> torch.device:
    """Where a model loaded for sampling computes (eval, serve, chat, Ray engine replicas): the
    current CUDA GPU when torch sees one, else the CPU. The Trainer places its model itself."""
    if torch.cuda.is_available():  # cuda-path: default-device
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(precision: str, device: torch.device) -> Any:
    """bf16 autocast on `device` for "bf16", nothing for "fp32" (a resolved precision only)."""
    if precision == "bf16":  # cuda-path: bf16-cuda (on a GPU device: CUDA autocast)
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp32":
        return nullcontext()
    raise ValueError(
        f"autocast needs a resolved precision (bf16 or fp32), got {precision!r}; "
        "call resolve_precision once where the run is built"
    )
