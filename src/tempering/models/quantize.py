"""int8 for CPU serving: dynamic quantization of the Linear layers through PyTorch's own
`torch.ao.quantization.quantize_dynamic` (fbgemm kernels).

Weights are stored as int8 with one scale per output channel; activations are quantized per
call at run time, so no calibration data is needed. Measured here against torchao's int8
weight-only and int8-dynamic configs (bench/int8.py, docs/speculative.md): the fbgemm dynamic
path was the fastest for batch-1 decode on this CPU (torchao's CPU kernels were slower than
plain bf16).

The LM head (tied to the embeddings on SmolLM2, 49k x 576: a fifth of the weights and most
of a decode step's matmul) is the sensitive and the expensive layer at once, so `head`
chooses: "int8" (quantized like the rest), "bf16" or "fp32" (kept in that precision).
A quantized model computes in fp32 activations: run its engine with precision "fp32" (bf16
autocast does not reach the int8 kernels).
"""

from __future__ import annotations

import copy
import io
from typing import Any, Literal

import torch

HEADS = ("int8", "bf16", "fp32")


class CastLinear(torch.nn.Module):
    """A Linear kept in another dtype: casts its input to the weight's dtype and its output back."""

    def __init__(self, linear: torch.nn.Linear, dtype: torch.dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(linear.weight.detach().to(dtype).clone(), requires_grad=False)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(dtype).clone(),
                                                                        requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def quantize_int8(model: Any, head: Literal["int8", "bf16", "fp32"] = "int8") -> Any:
    """A copy of `model` with every decoder Linear int8 (per-channel weights, dynamic activations).

    Args:
        model: an HF causal LM (fp32 weights); it is not modified.
        head: precision of the LM head: "int8", or kept in "bf16" / "fp32".
    Returns:
        the quantized copy, in eval mode (inference only).
    Raises:
        ValueError: an unknown `head`.
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if head not in HEADS:
        raise ValueError(f"head precision {head!r} is not one of {', '.join(HEADS)}")
    out = copy.deepcopy(model).float().eval()
    lm_head = out.get_output_embeddings()
    if head == "int8":
        return quantize_dynamic(out, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    quantize_dynamic(out.get_decoder(), {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    kept = lm_head if head == "fp32" else CastLinear(lm_head, torch.bfloat16)
    out.set_output_embeddings(kept)
    return out


def state_bytes(model: Any) -> int:
    """Bytes of the model's serialized state (int8 packed weights count as what they store)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes
