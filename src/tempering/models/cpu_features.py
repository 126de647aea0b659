"""What this CPU can run, decided by running it: one cached probe per CPU-specific path.

    if supports("onednn_bf16"):      # else the plain kernel, and the reason is logged once
        kernel = OneDNNKernel(weight)

Flags alone lie: under a VM the hypervisor may hide a flag or show one the kernel has not
enabled, and torch's own ops check conditions of their own (oneDNN's bf16 prepack refused an
AVX2-only EPYC at its first call, after `torch.backends.mkldnn.is_available()` said yes). So a
path is taken only when (1) the flags it needs are present and (2) its op, run once on a tiny
tensor, gives the plain kernel's numbers. The answer is cached for the process; a refusal is
logged once with its reason (`refusal(path)` returns it).

The flags come from /proc/cpuinfo, narrowed by the environment variable
`TEMPERING_CPU_FEATURES` when it is set: a comma list of host kinds (`HOST_KINDS`: avx2,
avx512, avx512_bf16, amx) or flag names, the flags a host of that kind has. With
`TEMPERING_CPU_FEATURES=avx2` an AMX host answers as an AVX2-only one does, so the fallbacks
run (and are tested) on any host. `emulation_env` adds the variables that make ATen, inductor,
oneDNN and MKL themselves run AVX2 code (read when torch first dispatches, so they must be
set before the process starts: tests/conftest.py and bench scripts do).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Callable

from tempering.errors import UserError

log = logging.getLogger(__name__)

MASK_ENV = "TEMPERING_CPU_FEATURES"

_AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})
_AVX512 = _AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
_AVX512_BF16 = _AVX512 | {"avx512_bf16", "avx512_vnni"}
HOST_KINDS: dict[str, frozenset[str]] = {
    "avx2": _AVX2,
    "avx512": _AVX512,
    "avx512_bf16": _AVX512_BF16,
    "amx": _AVX512_BF16 | {"amx_bf16", "amx_int8", "amx_tile", "avx_vnni", "avx512_fp16"},
}
"""The flags a host of each kind has (the ones any path here asks about)."""


class CpuFeatureError(UserError):
    """`TEMPERING_CPU_FEATURES` names a host kind or flag that is not known; one line."""


@dataclass(frozen=True)
class CpuPath:
    """A CPU-specific path: any one of `needs` (sets of flags) must be present, then `probe` runs."""

    needs: tuple[frozenset[str], ...]
    probe: Callable[[], str | None]  # None when the op ran and agreed, else why not
    fallback: str


def parse_mask(text: str) -> frozenset[str]:
    """The flags `TEMPERING_CPU_FEATURES` allows: the union of its host kinds and flag names.

    Raises:
        CpuFeatureError: an empty item or an unknown name (naming it and the kinds).
    """
    known = set().union(*HOST_KINDS.values())
    flags: set[str] = set()
    for item in (part.strip().lower() for part in text.split(",")):
        if item in HOST_KINDS:
            flags |= HOST_KINDS[item]
        elif item in known:
            flags.add(item)
        else:
            raise CpuFeatureError(
                f"{MASK_ENV}={text!r}: {item!r} is not a host kind ({', '.join(HOST_KINDS)}) or a flag any path asks about"
            )
    return frozenset(flags)


@lru_cache(maxsize=1)
def _proc_flags() -> frozenset[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return frozenset(
        next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    )


def cpu_flags() -> frozenset[str] | None:
    """The CPU's flags (/proc/cpuinfo) as narrowed by `TEMPERING_CPU_FEATURES`; None where they
    cannot be read and no mask is set (the probes alone decide then)."""
    flags, mask = _proc_flags(), os.environ.get(MASK_ENV)
    if not mask:
        return flags
    allowed = parse_mask(mask)
    return allowed if flags is None else flags & allowed


def emulation_env(mask: str) -> dict[str, str]:
    """Variables that make oneDNN, ATen, inductor and MKL's GEMMs run AVX2 code where the mask
    allows nothing wider (set them before torch starts); {} where it allows AVX-512. MKL too:
    AVX2 elementwise kernels beside AVX-512 GEMMs are a mix no real host runs.

    Raises:
        CpuFeatureError: as `parse_mask`.
    """
    if any(flag.startswith(("avx512", "amx")) for flag in parse_mask(mask)):
        return {}
    return {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def supports(path: str) -> bool:
    """Whether `path` runs here (flags present, then its op probed once); cached per process."""
    return refusal(path) is None


def refusal(path: str) -> str | None:
    """Why `path` does not run here, or None when it does (logged once, at the first refusal)."""
    return _decide(path, os.environ.get(MASK_ENV, ""))


def clear() -> None:
    """Forget every decision (tests that replace a probe or inductor's compiler; a changed mask is its own key)."""
    _decide.cache_clear()


@cache
def _decide(path: str, mask: str) -> str | None:
    spec = PATHS[path]
    flags = cpu_flags()
    reason = None
    if spec.needs and flags is not None and not any(need <= flags for need in spec.needs):
        wanted = " or ".join("+".join(sorted(need)) for need in spec.needs)
        reason = f"the CPU lacks {wanted}" + (f" ({MASK_ENV}={mask})" if mask else "")
    if reason is None:
        try:
            reason = spec.probe()
        except Exception as exc:  # the probe's whole point: torch refusing the op on this CPU
            reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    if reason is not None:
        log.info("CPU path %s off, %s: %s", path, spec.fallback, reason)
    return reason


def _close(got, want, tol: float) -> str | None:
    err = (got.float() - want.float()).abs().max().item()
    return None if err <= tol else f"probe result off by {err:.3g} (> {tol})"


def _probe_native_bf16() -> str | None:
    """A bf16 matmul through oneDNN, against fp32: the op exists and computes."""
    import torch

    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "torch's oneDNN reports no bf16 support"
    a, b = _tiny(16, 32), _tiny(32, 16, seed=1)
    return _close(a.bfloat16() @ b.bfloat16(), a @ b, tol=0.1)


def _probe_onednn_bf16() -> str | None:
    """oneDNN's prepacked bf16 linear with a fused post-op, against F.linear."""
    import torch
    import torch.nn.functional as F

    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return "torch has no oneDNN linear_pointwise op"
    x, w, other = _tiny(1, 32).bfloat16(), _tiny(16, 32, seed=1).bfloat16(), _tiny(1, 16, seed=2).bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
    got = torch.ops.mkldnn._linear_pointwise.binary(x, other, packed, None, "add")
    return _close(got, F.linear(x.float(), w.float()) + other.float(), tol=0.1)


def _probe_vnni_int8() -> str | None:
    """fbgemm's dynamic int8 linear with 8-bit activations on inputs whose u8 x s8 pair sums
    overflow int16 (255 * 127 * 2 > 32767): only int32 (VNNI) accumulation gets them right."""
    import torch

    x = torch.full((1, 64), 1.0)  # quantised over [0, 1]: every activation is u8 255
    scale = torch.full((4,), 1.0 / 127)
    w = torch.quantize_per_channel(torch.ones(4, 64), scale, torch.zeros(4, dtype=torch.long), 0, torch.qint8)
    got = torch.ops.quantized.linear_dynamic(x, torch.ops.quantized.linear_prepack(w, None), False)
    return _close(got, torch.full((1, 4), 64.0), tol=0.5)


def _probe_int8_weight_mm() -> str | None:
    """`aten._weight_int8pack_mm` (weight-only int8), against the dequantised matmul."""
    import torch

    x = _tiny(2, 32).bfloat16()
    q = (_tiny(16, 32, seed=1) * 100).round().clamp(-127, 127).to(torch.int8)
    scale = torch.full((16,), 0.01, dtype=torch.bfloat16)
    got = torch.ops.aten._weight_int8pack_mm(x, q, scale)
    return _close(got, x.float() @ (q.float() * 0.01).T, tol=0.1)


def _probe_inductor_cpp() -> str | None:
    """Inductor's CPU backend: the C++ compiler it would call, and a vector ISA it can build for."""
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    compiler = get_cpp_compiler()  # raises where none of its candidates is installed
    if shutil.which(compiler) is None:
        return f"no C++ compiler {compiler!r} for inductor"
    return None if pick_vec_isa() else "inductor found no vector ISA it can build for"


def _tiny(*shape: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


PATHS: dict[str, CpuPath] = {
    "native_bf16": CpuPath(
        (frozenset({"amx_bf16"}), frozenset({"avx512_bf16"})), _probe_native_bf16, 'precision "auto" runs fp32'
    ),
    "onednn_bf16": CpuPath(
        (frozenset({"avx_ne_convert"}), frozenset({"avx512bw", "avx512vl", "avx512dq"})),
        _probe_onednn_bf16,
        "the single-stream step runs bf16 F.linear",
    ),
    "vnni_int8": CpuPath(
        (frozenset({"avx512_vnni"}), frozenset({"avx_vnni"})),
        _probe_vnni_int8,
        "dynamic int8 takes 7-bit activations (reduce_range)",
    ),
    "int8_weight_mm": CpuPath((), _probe_int8_weight_mm, "weight-only int8 layers dequantise and run F.linear"),
    "inductor_cpp": CpuPath((), _probe_inductor_cpp, "train.compile runs the layers eagerly"),
}
"""Every CPU-specific path, by name: what it needs, how it is probed, what runs instead."""
