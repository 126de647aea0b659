"""int8 for CPU serving: the Linear layers of a model with int8 weights.

Two methods, both PyTorch's own kernels:

* "weight" (default): weight-only int8. Weights are int8 with one scale per output channel
  (symmetric, absmax); activations stay bf16 and the matmul is `aten._weight_int8pack_mm`,
  the CPU kernel that streams int8 weights and dequantizes inside the GEMM (the one torchao's
  int8 weight-only config and inductor's weight-only-quant lowering call on CPU). Decoding at
  batch 1 is memory-bound, so reading a quarter of fp32's bytes is the speedup, and float
  activations keep the outputs close to the float model.
* "dynamic": `torch.ao.quantization.quantize_dynamic` (fbgemm): activations are quantized per
  call too. Measured here it changed the default model's outputs too much (outlier channels in
  the hidden states: the arithmetic gate failed), so it is kept as the comparison.

The LM head (tied to the embeddings on SmolLM2, 49k x 576: a fifth of the weights) may stay
in "bf16" or "fp32" instead of "int8". The embedding itself is never quantized (a lookup).
Run the quantized model's engine in "fp32" or "bf16": the int8 layers cast their input to
the kernel's dtype and their output back.
"""

from __future__ import annotations

import copy
import io
from typing import Any, Literal

import torch

from tempering.errors import UserError
from tempering.models.cpu_features import supports

HEADS = ("int8", "bf16", "fp32")
METHODS = ("weight", "dynamic")


class CastLinear(torch.nn.Module):
    """A Linear kept in another dtype: casts its input to the weight's dtype and its output back."""

    def __init__(self, linear: torch.nn.Linear, dtype: torch.dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(linear.weight.detach().to(dtype).clone(), requires_grad=False)
        self.bias = (
            None
            if linear.bias is None
            else torch.nn.Parameter(linear.bias.detach().to(dtype).clone(), requires_grad=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: (q, scale) with weight ~= q * scale[:, None], |q| <= 127."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


KERNEL_K_MULTIPLE = 16
"""`_weight_int8pack_mm` reads its inner dimension in blocks of 16: with in_features 8, 24, 40
or 100 it returned wrong numbers or crashed (torch 2.13, measured), so such layers stay float."""


def int8_weight_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (q * scale[:, None])^T: `aten._weight_int8pack_mm` where this CPU runs it (probed,
    `cpu_features`), else the weight dequantised to `scale`'s dtype and F.linear."""
    if supports("int8_weight_mm"):
        return torch.ops.aten._weight_int8pack_mm(x, q, scale)
    return torch.nn.functional.linear(x, q.to(scale.dtype) * scale[:, None])


class _Int8Matmul(torch.autograd.Function):
    """x W^T through `_weight_int8pack_mm` (which has no backward); the backward returns the input's
    gradient grad W (the weight dequantised for that one product), the weight itself is frozen."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(q, scale)
        return int8_weight_mm(x, q, scale)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        q, scale = ctx.saved_tensors  # grad (n, out) @ (q * scale[:, None]) = (grad * scale) @ q, in scale's dtype
        (grad,) = grads
        return (grad.to(scale.dtype) * scale) @ q.to(scale.dtype), None, None


class Int8WeightLinear(torch.nn.Module):
    """y = x W^T + b with W int8 per output channel; x computed in bf16 (`_weight_int8pack_mm`),
    or fp32 as the frozen base of LoRA training (`models/lora.py`; gradients reach x, never W)."""

    weight_int8: torch.Tensor  # buffers (register_buffer), typed for attribute access
    scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: torch.nn.Linear, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        q, scale = int8_per_channel(linear.weight)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", q.contiguous())
        self.register_buffer("scale", scale.to(compute_dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(compute_dtype).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.scale.dtype).contiguous()
        y = _Int8Matmul.apply(flat, self.weight_int8, self.scale)
        assert isinstance(y, torch.Tensor)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    @property
    def qweight(self) -> torch.Tensor:
        """The stored weight under the name PEFT looks for on quantised layers (to place adapters)."""
        return self.weight_int8

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, weight=int8, compute={self.scale.dtype}"
        )


def int8_weight_fits(linear: torch.nn.Linear) -> bool:
    """Whether the weight-only kernel takes this layer (its in_features a multiple of 16)."""
    return linear.in_features % KERNEL_K_MULTIPLE == 0


def _swap_linears(module: torch.nn.Module, compute_dtype: torch.dtype = torch.bfloat16) -> None:
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            if int8_weight_fits(child):
                setattr(module, name, Int8WeightLinear(child, compute_dtype))
        else:
            _swap_linears(child, compute_dtype)


def int8_base_in_place(model: Any, compute_dtype: torch.dtype = torch.bfloat16) -> Any:
    """QLoRA-style base: the decoder's Linear layers become frozen int8 (per-channel), in place;
    embeddings, norms, the LM head and layers the kernel cannot take stay float. Returns `model`.

    The base's matmuls run in `compute_dtype`: bf16 by default, as QLoRA computes; the int8 kernel
    in fp32 took ~17x the time of a float matmul here (2,048 x 8,192, 64 tokens), in bf16 0.7x.
    """
    _swap_linears(model.get_decoder(), compute_dtype)
    model.requires_grad_(False)
    return model


def quantize_int8(
    model: Any, head: Literal["int8", "bf16", "fp32"] = "int8", method: Literal["weight", "dynamic"] = "weight"
) -> Any:
    """A copy of `model` with every decoder Linear int8 (per-channel weight scales); with
    "weight", layers the kernel cannot take (`int8_weight_fits`) stay in float.

    Args:
        model: an HF causal LM; it is not modified.
        head: precision of the LM head: "int8", or kept in "bf16" / "fp32".
        method: "weight" (int8 weights, bf16 activations) or "dynamic" (torch.ao dynamic:
            activations quantized per call as well).
    Returns:
        the quantized copy, in eval mode (inference only).
    Raises:
        UserError: an unknown `head` or `method`.
    """
    if head not in HEADS:
        raise UserError(f"head precision {head!r} is not one of {', '.join(HEADS)}")
    if method not in METHODS:
        raise UserError(f"int8 method {method!r} is not one of {', '.join(METHODS)}")
    out = copy.deepcopy(model).float().eval()
    lm_head = out.get_output_embeddings()
    if method == "dynamic":
        from torch.ao.quantization import quantize_dynamic
        from torch.ao.quantization.qconfig import per_channel_dynamic_qconfig

        quantize_dynamic(
            out if head == "int8" else out.get_decoder(), {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True
        )
    else:
        _swap_linears(out.get_decoder())
        if head == "int8" and int8_weight_fits(lm_head):
            out.set_output_embeddings(Int8WeightLinear(lm_head))
    if head != "int8":
        out.set_output_embeddings(lm_head if head == "fp32" else CastLinear(lm_head, torch.bfloat16))
    return out


def state_bytes(model: Any) -> int:
    """Bytes of the model's serialized state (int8 packed weights count as what they store)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes
