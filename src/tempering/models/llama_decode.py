"""A single-stream decode step for Llama-family models, in plain tensor code.

    decoder = llama_decoder(model, max_positions=2048)   # None when the model is not served
    logits = decoder.step(token, pos, keys, values)       # (1, V); writes K/V at `pos`

At batch 1 an HF forward is ~300 small module calls per token on a 30-layer, 576-wide model,
and its Linears run F.linear on unpacked weights. This step reads weights built once from the
HF model and makes ~15 tensor calls per layer:

* q/k/v are one matrix; RoPE is `q cos + swap_halves(q) sin'` with cos/sin tables precomputed
  for every position and rotate_half's sign folded into sin' (exact in any dtype: a negation);
  (rotate_half's rows appended to the matrix instead cost 9% more weight bytes per token);
* under bf16 every matrix is prepacked once for oneDNN (`mkldnn._reorder_linear_weight`, the
  blocked layout inductor's freezing pass makes) and the residual add, SiLU and gate product
  ride on the matmul as oneDNN post-ops where the CPU runs them (`cpu_features`' probe
  "onednn_bf16": AVX512-BW/VL/DQ or AVX-NE-CONVERT; else bf16 F.linear); fp32 runs F.linear; a model whose Linears are
  `Int8WeightLinear` (`models/quantize.py`) runs `aten._weight_int8pack_mm` on the same int8
  rows and scales, casting as that module does (activations bf16, residual in its dtype); one
  from `quantize_int8(method="dynamic")` runs fbgemm's `quantized.linear_dynamic` (int8
  weights prepacked, activations quantised per call, fp32 in and out) as its Linears do, with
  8-bit activations where the CPU has VNNI (`DynamicInt8Kernel`);
* RMSNorm is `F.rms_norm`; attention is SDPA over positions 0..pos of the caller's K/V with
  grouped K/V heads.

The K/V live in the caller's tensors (per layer (1, kv_heads, length, head_dim), a row of
`rollout/kvcache.py`'s slot cache), so the caller mixes this step with HF forwards over one cache.

Served: `model_type` "llama" (SmolLM2, Llama 2/3, TinyLlama, ...) without attention or MLP
biases, SiLU MLP, RoPE whose cos/sin depend on the position alone (default, linear, llama3),
LoRA only merged. `unsupported_reason` says why anything else (MoE, VLMs, Qwen's biases,
dynamic / yarn / longrope scaling) is not, and the caller keeps its HF path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from tempering.models.cpu_features import supports
from tempering.models.precision import cpu_has_vnni
from tempering.models.quantize import int8_weight_mm

__all__ = ["LlamaDecoder", "llama_decoder", "unsupported_reason"]

ROPE_TYPES = ("default", "linear", "llama3")
"""RoPE variants whose cos/sin are a function of the position alone (precomputed once)."""


class _Unfused:
    """The epilogues of a kernel without fused post-ops: applied after its matmul `self(x)`."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def add(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """x W^T + other."""
        return other + self(x)

    def mul(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """x W^T * other."""
        return self(x) * other

    def silu(self, x: torch.Tensor) -> torch.Tensor:
        """silu(x W^T)."""
        return F.silu(self(x))


class DenseKernel(_Unfused):
    """y = x W^T with F.linear (fp32, or bf16 where oneDNN is missing)."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype):
        self.weight = weight.detach().to(dtype).contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class OneDNNKernel:
    """y = x W^T, W bf16 prepacked for oneDNN once; add / mul / silu fused as post-ops."""

    def __init__(self, weight: torch.Tensor):
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16).contiguous(), 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    def add(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.packed, None, "add")

    def mul(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.packed, None, "mul")

    def silu(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "swish", [], "")


class Int8Kernel(_Unfused):
    """y = x (q * scale)^T through `aten._weight_int8pack_mm`: x cast to bf16 and y back to the
    residual's dtype, as `Int8WeightLinear` does, so the products are the same numbers."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
        self.q, self.scale, self.dtype = q.contiguous(), scale.to(torch.bfloat16).contiguous(), dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return int8_weight_mm(x.to(torch.bfloat16), self.q, self.scale).to(self.dtype)


class DynamicInt8Kernel(_Unfused):
    """y = x (q * scale)^T through fbgemm's `quantized.linear_dynamic`, the op of a model from
    `quantize_int8(method="dynamic")`: W int8 per output row, prepacked once; x fp32, quantised
    per call inside the op (uint8 over min(x, 0)..max(x, 0)), y fp32. At M=1 it reads its int8
    weights ~1.5x as fast as `_weight_int8pack_mm` (bench/diagnostics/decode_roofline.py).

    `reduce_range` (7-bit activations) is what `torch.ao.nn.quantized.dynamic.Linear` passes:
    without VNNI fbgemm sums u8 x s8 pairs in int16, which 8 bits can overflow. Where the CPU
    has VNNI (int32 sums) the step takes 8 bits: on the default model that cut the KL from the
    bf16 step from 0.064 to 0.023 per token (weight-only int8: 0.008; 41 tokens, measured)."""

    def __init__(self, weights: list[torch.Tensor], reduce_range: bool):
        q = torch.cat([w.int_repr() for w in weights])
        scale = torch.cat([w.q_per_channel_scales() for w in weights])
        # q * scale requantised with the same scales is q again (|q| <= 128: exact)
        w = torch.quantize_per_channel(
            (q.double() * scale[:, None]).float(), scale, torch.zeros_like(scale).long(), 0, torch.qint8
        )
        self.packed = torch.ops.quantized.linear_prepack(w, None)
        self.reduce_range = reduce_range

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)


Kernel = DenseKernel | OneDNNKernel | Int8Kernel | DynamicInt8Kernel


def rope(y: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """y cos + rotate_half(y) sin for heads laid end to end: y, cos (heads * head_dim,);
    `signed_sin` is sin with rotate_half's sign folded in (-sin on each head's first half), so
    rotate_half(y) sin = swap_halves(y) signed_sin."""
    swapped = y.view(-1, 2, head_dim // 2).flip(1).view(y.shape)  # per head [y2, y1]
    return torch.addcmul(y * cos, swapped, signed_sin)


class LlamaDecoder:
    """Batch-1 decode over weights built once from an HF Llama model (see the module doc)."""

    def __init__(self, model: Any, max_positions: int):
        cfg, inner = model.config, model.get_decoder()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps, self.hidden = cfg.rms_norm_eps, cfg.hidden_size
        int8 = _int8(inner.layers[0].mlp.down_proj)
        self.int8 = int8 is not None
        # the step's dtype: the Linears' under bf16 (bf16 copies of fp32 weights included), else
        # the model's; the weight-only int8 kernel keeps the residual in the embedding's dtype as
        # `Int8WeightLinear` does; fbgemm's dynamic int8 takes and returns fp32
        if int8 == "dynamic":
            self.dtype = torch.float32
        elif int8 == "weight":
            self.dtype = inner.embed_tokens.weight.dtype
        else:
            self.dtype = _weight(inner.layers[0].mlp.down_proj).dtype
        device = inner.embed_tokens.weight.device
        on_cpu = device == torch.device("cpu")  # oneDNN's prepacked matmul is a CPU kernel
        self.onednn = not self.int8 and self.dtype == torch.bfloat16 and on_cpu and supports("onednn_bf16")
        self.embed = inner.embed_tokens.weight.detach().to(self.dtype)
        self.layers = [self._layer(block) for block in inner.layers]
        self.norm = inner.norm.weight.detach().to(self.dtype)
        self.head = self._kernel([model.get_output_embeddings()])
        cos, sin = inner.rotary_emb(self.embed[:1], torch.arange(max_positions, device=self.embed.device)[None])
        rows = self.heads + self.kv_heads  # cos/sin tiled over the q and k heads: (P, rows * head_dim)
        half = self.head_dim // 2  # rotate_half(y) = [-y2, y1] = swap_halves(y) * [-1, 1]: the sign goes into sin
        sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(sin)
        self.cos, self.sin = cos[0].to(self.dtype).repeat(1, rows), (sin[0] * sign).to(self.dtype).repeat(1, rows)
        self.max_positions = max_positions

    def _layer(self, block: Any) -> dict[str, Any]:
        attn, mlp = block.self_attn, block.mlp
        return {
            "attn_norm": block.input_layernorm.weight.detach().to(self.dtype),
            "qkv": self._kernel([attn.q_proj, attn.k_proj, attn.v_proj]),
            "o": self._kernel([attn.o_proj]),
            "mlp_norm": block.post_attention_layernorm.weight.detach().to(self.dtype),
            "gate": self._kernel([mlp.gate_proj]),
            "up": self._kernel([mlp.up_proj]),
            "down": self._kernel([mlp.down_proj]),
        }

    def _kernel(self, modules: list[Any]) -> Kernel:
        """One kernel over the modules' weights stacked by output row. Int8 when every module
        is int8 of one kind (`_int8`; per-row scales move with their rows), else float."""
        kinds = {_int8(m) for m in modules}
        if kinds == {"weight"}:
            return Int8Kernel(
                torch.cat([m.weight_int8 for m in modules]), torch.cat([m.scale for m in modules]), self.dtype
            )
        if kinds == {"dynamic"}:
            return DynamicInt8Kernel([m.weight() for m in modules], reduce_range=not cpu_has_vnni())
        weight = torch.cat([_weight(m) for m in modules])
        return OneDNNKernel(weight) if self.onednn else DenseKernel(weight, self.dtype)

    @torch.no_grad()
    def step(self, token: torch.Tensor, pos: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
        """One token through every layer.

        Args:
            token: (1,) the token at position `pos`.
            pos: its position (< max_positions); keys/values hold positions 0..pos-1 already.
            keys, values: per layer (1, kv_heads, >= pos + 1, head_dim); position `pos` is written.
        Returns:
            (1, V) fp32 logits of the next token.
        """
        h = F.embedding(token, self.embed)  # (1, hidden)
        cos, sin = self.cos[pos], self.sin[pos]  # (rows * head_dim,)
        shape = (self.hidden,)
        for layer, k_cache, v_cache in zip(self.layers, keys, values):
            x = F.rms_norm(h, shape, layer["attn_norm"], self.eps)
            h = layer["o"].add(self._attention(layer["qkv"](x), cos, sin, pos, k_cache, v_cache), h)
            x = F.rms_norm(h, shape, layer["mlp_norm"], self.eps)
            h = layer["down"].add(layer["up"].mul(x, layer["gate"].silu(x)), h)
        return self.head(F.rms_norm(h, shape, self.norm, self.eps)).float()

    def _attention(self, qkv: torch.Tensor, cos, sin, pos: int, k_cache, v_cache) -> torch.Tensor:
        """qkv (1, [q, k, v]) -> (1, heads * head_dim); this token's K/V written at `pos`."""
        d, nq, nkv = self.head_dim, self.heads, self.kv_heads
        n = (nq + nkv) * d
        qk = rope(qkv[0, :n], cos, sin, d)
        k_cache.select(2, pos).copy_(qk[nq * d :].view(1, nkv, d))
        v_cache.select(2, pos).copy_(qkv[:, n:].view(1, nkv, d))
        k, v = k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1]
        if k.dtype != self.dtype:  # a cache HF filled under autocast (fp32 keys, bf16 values)
            k, v = k.to(self.dtype), v.to(self.dtype)
        out = F.scaled_dot_product_attention(qk[: nq * d].view(1, nq, 1, d), k, v, enable_gqa=nq != nkv)
        return out.view(1, nq * d)


def _int8(module: Any) -> str | None:
    """ "weight" for an `Int8WeightLinear`, "dynamic" for fbgemm's dynamic int8 Linear
    (`quantize_int8`'s two methods), None for a float Linear."""
    if hasattr(module, "weight_int8"):
        return "weight"
    if isinstance(module, DynamicQuantizedLinear):
        return "dynamic"
    return None


def _weight(module: Any) -> torch.Tensor:
    """A Linear's weight (a PEFT LoRA layer's base weight, merged: see `unsupported_reason`)."""
    return getattr(module, "base_layer", module).weight


def unsupported_reason(model: Any) -> str | None:
    """Why `LlamaDecoder` cannot serve this model, or None when it can."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return f"model type {getattr(cfg, 'model_type', None)!r} is not 'llama'"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "attention or MLP biases"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in ROPE_TYPES:
        return f"rope type {rope!r} (served: {', '.join(ROPE_TYPES)})"
    for module in model.modules():
        if hasattr(module, "lora_A") and not getattr(module, "merged", False):
            return "an unmerged LoRA adapter"
    return None


def llama_decoder(model: Any, max_positions: int) -> LlamaDecoder | None:
    """A `LlamaDecoder` over `model`'s weights as they are now, or None when it cannot serve it."""
    if unsupported_reason(model) is not None:
        return None
    return LlamaDecoder(model, max_positions)
