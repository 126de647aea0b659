"""Roofline of one single-stream decode step (`models/llama_decode.py`) on this host.

Measures, at each thread count: streaming-read bandwidth (a sum over a 300 MB tensor); each
matmul shape of one step at M=1 as the step runs it, and the alternatives this torch has
(bf16 F.linear, bf16 oneDNN-prepacked, int8 `_weight_int8pack_mm`, fbgemm dynamic int8); and
the rest of the step (Python, dispatch, norms, RoPE, attention: the same 30-layer step on a
model whose matrices are tiny). The matmuls run as a whole step does: 30 layers of distinct
weights and the head in the step's order, so the weights stream from memory, not from cache.
(oneDNN's int8 `qlinear_pointwise` was tried too: ~50 ms a call at M=1, not a candidate.)

At one thread the clock is the thread's CPU time, so other processes' load on a shared host
does not count (their pressure on memory bandwidth still does); at more threads it is wall time.

Prints a table and the split of ms per token: weight bytes at the measured bandwidth, the
kernels' time above that, and everything else (Python, dispatch, norms, attention).

    python bench/diagnostics/decode_roofline.py [--threads 1 2] [--reps 5]   (prints; writes nothing)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from _shared.model_shapes import SHAPES  # noqa: E402

SHAPE = SHAPES["smollm2-135m"]
VOCAB = 49_152
clock = time.perf_counter  # main() sets it per thread count


def shapes() -> dict[str, tuple[int, int, int]]:
    """name -> (out, in, copies per step) of the step's matmuls."""
    h, i, d = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["head_dim"]
    q, kv, layers = SHAPE["num_attention_heads"] * d, SHAPE["num_key_value_heads"] * d, SHAPE["num_hidden_layers"]
    return {
        "qkv": (q + 2 * kv, h, layers),
        "o": (h, q, layers),
        "gate": (i, h, layers),
        "up": (i, h, layers),
        "down": (h, i, layers),
        "head": (VOCAB, h, 1),
    }


def best(fn: Callable[[], object], reps: int) -> float:
    """Least seconds of `fn` over `reps` calls after one warm-up (the least: on a shared host
    the other load only ever adds time)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def bandwidth(reps: int) -> float:
    """GB/s of summing a 300 MB fp32 tensor."""
    x = torch.ones(75_000_000)
    return x.numel() * 4 / best(lambda: x.sum(), reps) / 1e9


def kernel(kind: str, w: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """(x -> x W^T, weight bytes) of one fp32 weight under `kind`."""
    if kind.startswith("bf16"):
        bf = w.to(torch.bfloat16).contiguous()
        if kind == "bf16_linear":
            return (lambda x: F.linear(x, bf)), bf.numel() * 2
        packed = torch.ops.mkldnn._reorder_linear_weight(bf, 1)
        return (lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")), bf.numel() * 2
    scale = w.abs().amax(1).clamp(min=1e-12) / 127
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    if kind == "int8_pack_mm":
        scale_bf = scale.to(torch.bfloat16)
        return (lambda x: torch.ops.aten._weight_int8pack_mm(x, q, scale_bf)), q.numel() + scale.numel() * 2
    zero = torch.zeros(w.shape[0], dtype=torch.long)
    qt = torch.quantize_per_channel(w, scale.double(), zero, 0, torch.qint8)  # the same q
    fbgemm = torch.ops.quantized.linear_prepack(qt, None)
    return (lambda x: torch.ops.quantized.linear_dynamic(x, fbgemm, True)), q.numel() + scale.numel() * 4


KINDS = {"bf16_linear": torch.bfloat16, "bf16_onednn": torch.bfloat16, "int8_pack_mm": torch.bfloat16}
KINDS["int8_fbgemm_dyn"] = torch.float32  # fp32 in and out; the activation is quantised inside


def matmul_table(reps: int, step_shapes: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """kind -> shape -> (ms per step, GB/s): every matmul of a whole step in the step's order,
    30 layers of distinct weights and the head (so the weights stream from memory as in a real
    step: ~300 MB bf16, 150 MB int8, against a 32 MB L3), per-shape times from the fastest rep."""
    sizes = shapes()
    layer_shapes = [s for s in step_shapes if s != "head"]
    layers = sizes[layer_shapes[0]][2]
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for kind, dtype in KINDS.items():
        gen = torch.Generator().manual_seed(0)
        calls = [
            (s, *kernel(kind, torch.randn(sizes[s][:2], generator=gen) * 0.05))
            for _ in range(layers)
            for s in layer_shapes
        ]
        calls.append(("head", *kernel(kind, torch.randn(sizes["head"][:2], generator=gen) * 0.05)))
        xs = {s: torch.randn(1, sizes[s][1]).to(dtype) for s in step_shapes}
        runs = []
        for _ in range(reps + 1):
            spent = dict.fromkeys(step_shapes, 0.0)
            for s, fn, _ in calls:
                t0 = clock()
                fn(xs[s])
                spent[s] += clock() - t0
            runs.append(spent)
        fastest = min(runs[1:], key=lambda r: sum(r.values()))
        nbytes = {s: sum(b for name, _, b in calls if name == s) for s in step_shapes}
        table[kind] = {s: (fastest[s] * 1e3, nbytes[s] / fastest[s] / 1e9) for s in step_shapes}
        del calls
    return table


def overhead(reps: int) -> float:
    """ms of one bf16 step of `LlamaDecoder` on a 30-layer model whose matrices are tiny."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tempering.models.llama_decode import LlamaDecoder

    cfg = {**SHAPE, "hidden_size": 144, "intermediate_size": 128, "vocab_size": 256}  # attention as the real step
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval().bfloat16()
    dec = LlamaDecoder(model, 512)
    shape = (1, cfg["num_key_value_heads"], 512, cfg["head_dim"])
    keys = [torch.zeros(shape, dtype=torch.bfloat16) for _ in range(cfg["num_hidden_layers"])]
    values = [torch.zeros(shape, dtype=torch.bfloat16) for _ in range(cfg["num_hidden_layers"])]
    token = torch.tensor([5])
    return best(lambda: dec.step(token, 100, keys, values), reps * 4) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    sizes = shapes()
    step_shapes = ["qkv", "o", "gate", "up", "down", "head"]
    for threads in args.threads:
        torch.set_num_threads(threads)
        global clock
        clock = time.thread_time if threads == 1 else time.perf_counter
        gbs = bandwidth(args.reps)
        over = overhead(args.reps)
        print(f"\n== {threads} thread(s): read {gbs:.1f} GB/s; step with tiny matrices {over:.2f} ms", flush=True)
        table = matmul_table(args.reps, step_shapes)
        print(f"{'kind':16s} " + " ".join(f"{s + ' ' + 'x'.join(map(str, sizes[s][:2])):>22s}" for s in step_shapes))
        for kind, row in table.items():
            print(f"{kind:16s} " + " ".join(f"{row[s][0]:8.2f} ms {row[s][1]:5.1f} GB/s" for s in step_shapes))
        for kind, row in table.items():
            mm = sum(ms for ms, _ in row.values())
            floor = sum(ms * gb for ms, gb in row.values()) / gbs  # weight bytes at the read bandwidth
            print(
                f"{kind}: matmuls {mm:.2f} ms = bytes at {gbs:.1f} GB/s {floor:.2f} + kernel {mm - floor:.2f};"
                f" + rest of the step {over:.2f} ms -> {1e3 / (mm + over):.0f} tokens/s"
            )


if __name__ == "__main__":
    main()
