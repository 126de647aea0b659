"""Hardware peak and model-FLOP accounting for MFU-style throughput reports.

* `measure_bf16_matmul_peak(seconds, device="cpu")` -- achieved FLOP/s of a square bf16 matmul on the
  CPU (however many torch threads the caller has set) or a GPU. This is an *achievable* peak (what
  oneDNN/AMX or cuBLAS reaches on a large GEMM), not the datasheet number.
* `model_flops_per_token(model, seq_len=None, training=True)` -- FLOPs per token for one training
  step (forward + backward), with the usual conventions spelled out below.

FLOP convention (Kaplan et al. 2020 / PaLM appendix B / Megatron MFU):

* One multiply-add = 2 FLOPs.
* A dense weight matrix of P parameters costs 2*P FLOPs/token forward, 4*P backward (gradient w.r.t.
  activations and w.r.t. weights), hence 6*P per trained token. We count *all* matmul weights, including
  the LM head, even when frozen (e.g. LoRA): a frozen weight still pays forward + activation-gradient
  (4*P) -- we deliberately keep 6*P so numbers are comparable across full-FT and PEFT runs (this is the
  standard "model FLOPs" convention, which does not depend on implementation tricks).
* Embedding lookups are gathers, not matmuls: the input embedding is excluded. With tied embeddings
  (SmolLM2) the shared matrix is still counted once, for its use as the LM head.
* Attention scores and weighted sum (QK^T and AV): 2 matmuls of 2*seq*d_attn FLOPs each per token per
  layer forward, i.e. 4*L*seq*d_attn forward and 12*L*seq*d_attn for training, where d_attn =
  n_heads*head_dim. Causal masking halves the useful work, so with `causal=True` (default) we use
  6*L*seq*d_attn per token (PaLM counts the full square; we note both). `seq_len` is the length of the
  sequence a token attends within (for packed / padding-free batches: the document length, not the
  pack length). Pass `seq_len=None` to drop the attention term (pure 6N).
* Norms, activations, softmax, RoPE, optimizer are ignored (they are not matmuls).
"""

from __future__ import annotations

import time

import torch

__all__ = ["measure_bf16_matmul_peak", "model_flops_per_token", "matmul_param_count"]


def measure_bf16_matmul_peak(
    seconds: float = 3.0, n: int | None = None, dtype: torch.dtype = torch.bfloat16, device: str = "cpu"
) -> float:
    """Return the achieved FLOP/s of an `n x n @ n x n` matmul in `dtype` on `device`.

    Runs a short warm-up, then repeats the matmul (into a preallocated output) for about `seconds`
    and reports `2*n^3 * iterations / elapsed`. Thread count is whatever the caller configured.
    `n` defaults to 2048 on a CPU and 8192 on a GPU (where a smaller product cannot fill the chip);
    on a GPU every product is waited for before the clock is read.
    """
    on_gpu = torch.device(device).type == "cuda"
    n = n or (8192 if on_gpu else 2048)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    flop = 2.0 * n * n * n
    # Warm-up: lets oneDNN pick / JIT its kernel and warms the caches.
    t_end = time.perf_counter() + min(0.5, seconds / 4)
    while time.perf_counter() < t_end:
        torch.matmul(a, b, out=out)
        sync()
    best = 0.0
    iters, t0 = 0, time.perf_counter()
    deadline = t0 + seconds
    # Report the best of several ~equal windows (robust to a noisy neighbour), over the whole duration.
    window_start, window_iters = t0, 0
    while True:
        torch.matmul(a, b, out=out)
        sync()
        iters += 1
        window_iters += 1
        now = time.perf_counter()
        if now - window_start >= seconds / 5:
            best = max(best, flop * window_iters / (now - window_start))
            window_start, window_iters = now, 0
        if now >= deadline:
            break
    overall = flop * iters / (time.perf_counter() - t0)
    return max(best, overall)


def _is_matmul_weight(name: str, p: torch.nn.Parameter) -> bool:
    return p.dim() == 2 and "embed" not in name and "wte" not in name and "wpe" not in name


def matmul_param_count(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Parameters that take part in per-token matmuls (2-D weights, excluding input embeddings, but
    including the LM head even when it is tied to the input embedding)."""
    seen: set[int] = set()
    total = 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        if trainable_only and not p.requires_grad:
            continue
        if _is_matmul_weight(name, p):
            seen.add(id(p))
            total += p.numel()
    # Tied LM head: the shared weight is registered under the embedding's name only.
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    if head is not None and getattr(head, "weight", None) is not None and id(head.weight) not in seen:
        if not trainable_only or head.weight.requires_grad:
            total += head.weight.numel()
    return total


def model_flops_per_token(
    model: torch.nn.Module,
    seq_len: float | None = None,
    *,
    training: bool = True,
    causal: bool = True,
    trainable_only: bool = False,
) -> float:
    """FLOPs per token of one training step (forward+backward) or, with `training=False`, of a forward.

    `6 * N` (2*N forward) where N = `matmul_param_count(model)` -- all matmul weights by default, see the
    module docstring -- plus, if `seq_len` is given, the attention-score term
    `(causal ? 6 : 12) * n_layers * seq_len * n_heads * head_dim` (a third of that for forward only).
    For a batch with documents of different lengths, pass the token-weighted mean document length
    (sum(l_i^2) / sum(l_i)), which makes the per-token attention term exact in aggregate.
    """
    n = matmul_param_count(model, trainable_only=trainable_only)
    mult = 6.0 if training else 2.0
    flops = mult * n
    if seq_len:
        cfg = getattr(model, "config", None)
        cfg = cfg.get_text_config() if cfg is not None and hasattr(cfg, "get_text_config") else cfg
        n_layers = getattr(cfg, "num_hidden_layers", None)
        n_heads = getattr(cfg, "num_attention_heads", None)
        hidden = getattr(cfg, "hidden_size", None)
        head_dim = getattr(cfg, "head_dim", None) or (hidden // n_heads if hidden and n_heads else None)
        if n_layers and n_heads and head_dim:
            attn_fwd = 4.0 * n_layers * seq_len * n_heads * head_dim  # QK^T + AV, full square
            if causal:
                attn_fwd /= 2
            flops += attn_fwd * (3.0 if training else 1.0)
    return flops


if __name__ == "__main__":
    import sys

    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"bf16 matmul peak: {measure_bf16_matmul_peak(secs) / 1e9:.1f} GFLOP/s")
    print(f"fp32 matmul peak: {measure_bf16_matmul_peak(secs, dtype=torch.float32) / 1e9:.1f} GFLOP/s")
