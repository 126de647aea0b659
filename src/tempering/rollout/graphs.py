"""Decode steps without launch overhead: the batching engine's decode forward captured as CUDA
graphs, one per batch-size bucket (`engine.cuda_graphs`, docs/gpu.md).

    graphs = GraphDecode(forward, cache, decode_buckets(max_slots), pad_id, capture=True)
    logits = graphs.decode(tokens, positions)       # (b, V): row i is running slot i

An eager decode step of a small model is a few thousand kernel launches, each costing the CPU
more than the GPU spends on it; replaying a captured graph launches them all at once. A graph
replays fixed shapes at fixed addresses, so:

* the K/V live in a `StaticSlotKVCache` (one shape, never moved or freed; attention over all its
  positions, masked per row), not the growing `SlotKVCache`;
* a step with b running sequences runs in the smallest bucket >= b (`bucket_for`): powers of two
  below the engine's `max_slots`, then `max_slots` itself. The live rows come first (slots 0..b-1,
  as always); rows b..bucket-1 are dummies (the pad token at position 0, `pad_to_bucket`) that
  write only position 0 of free slots, which a prefill overwrites before any sequence reads
  them, and whose logits are dropped;
* each bucket has static input buffers; its graph is captured the first time the bucket runs
  (two warm-up forwards on a side stream, then the capture, all on the step's real inputs: a
  decode forward writes the same K/V however often it runs) and replayed after. The engine drops
  the graphs when the weights move to other tensors (`GraphDecode.reset`).

transformers' own `StaticCache` writes every row of a step at one shared position, so it cannot
hold rows at different lengths (continuous batching); `StaticSlotKVCache` follows its recipe
(preallocated, updated in place) with a position per row. The graphs are captured with
`torch.cuda.CUDAGraph` rather than `torch.compile(mode="reduce-overhead")`: compile's graph
trees are per thread (the serving thread is not the one that calls `generate`; pytorch#123177)
and compile each new shape for tens of seconds, where a capture takes a few forwards.

Off a GPU (`capture=False`) `decode` runs the same forward over the same static buffers
eagerly: what the CPU tests check against the dynamic path.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Sequence

import torch

from tempering.errors import UserError
from tempering.models.precision import autocast
from tempering.models.rope import rope_summary
from tempering.rollout.kvcache import StaticSlotKVCache

__all__ = [
    "CUDA_GRAPHS",
    "GraphDecode",
    "bucket_for",
    "cuda_graphs_off",
    "decode_buckets",
    "decode_forward",
    "pad_to_bucket",
    "weights_key",
]

CUDA_GRAPHS = ("auto", "on", "off")
"""`engine.cuda_graphs`: auto is on where the model is on a CUDA device, off elsewhere."""
WARMUP_FORWARDS = 2
"""Eager forwards on a side stream before a capture (lazy initialisation, library handles)."""

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(input ids (B, 1), positions (B, 1)) -> (B, V) fp32 logits, K/V written into the static cache."""


HOST_SYNC_ROPE = ("dynamic", "longrope")
"""RoPE types whose rotary embedding reads the longest position back to the host every forward
(transformers' `dynamic_rope_update`): a forward that syncs the host cannot be captured."""


def cuda_graphs_off(setting: str, device: torch.device, config: Any = None) -> str | None:
    """Why decode steps of a model on `device` (its transformers `config`) do not run as captured
    graphs under `setting`, or None when they do.

    Raises:
        UserError: `on` where they cannot: no CUDA device, or a forward that syncs the host.
    """
    if setting not in CUDA_GRAPHS:
        raise ValueError(f"cuda_graphs {setting!r} is not one of {', '.join(CUDA_GRAPHS)}")
    if setting == "off":
        return "engine.cuda_graphs: off"
    reason = None
    rope = (rope_summary(config) or {}) if config is not None else {}
    if device.type != "cuda":  # cuda-path: cuda-graphs
        reason = f"needs a CUDA device; the model samples on {device.type}"
    elif rope.get("rope_type", rope.get("type")) in HOST_SYNC_ROPE:
        reason = f"rope type {rope.get('rope_type', rope.get('type'))!r} reads positions back to the host each forward"
    if reason is not None and setting == "on":
        raise UserError(f"engine.cuda_graphs: on {reason} (use auto or off)")
    return reason


def decode_buckets(max_rows: int) -> tuple[int, ...]:
    """The batch sizes decode steps run at: powers of two below `max_rows`, then `max_rows`
    (so the cache holds no row a step cannot use, and padding at most doubles a step)."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    powers = [1 << k for k in range(max_rows.bit_length()) if 1 << k < max_rows]
    return (*powers, max_rows)


def bucket_for(rows: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `rows` sequences (`buckets` ascending).

    Raises:
        ValueError: rows < 1, or more rows than the largest bucket.
    """
    if rows < 1 or rows > buckets[-1]:
        raise ValueError(f"{rows} rows do not fit the decode buckets {tuple(buckets)}")
    return next(b for b in buckets if b >= rows)


def pad_to_bucket(
    tokens: Sequence[int], positions: Sequence[int], bucket: int, pad_id: int
) -> tuple[list[int], list[int]]:
    """The live rows' (token, position) first, then dummy rows (`pad_id` at position 0) up to
    `bucket` rows; a dummy row writes only position 0 of its (free) slot."""
    if len(tokens) != len(positions) or len(tokens) > bucket:
        raise ValueError(f"{len(tokens)} tokens and {len(positions)} positions for a bucket of {bucket} rows")
    dummies = bucket - len(tokens)
    return [*tokens, *[pad_id] * dummies], [*positions, *[0] * dummies]


def decode_forward(model: Any, cache: StaticSlotKVCache, cache_kw: str, precision: str) -> Forward:
    """The decode forward a graph captures: `model` over `cache` (passed as its `cache_kw`
    argument), (B, 1) ids at (B, 1) positions -> (B, V) fp32 logits. Autocast runs without its
    cast cache: a graph would read casts that are freed once the capture's context exits."""

    def forward(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cache.bind(positions[:, 0], cache.length - 1)
        with autocast(precision, ids.device, cache=False):
            out = model(
                input_ids=ids,
                position_ids=positions,
                attention_mask=cache.decode_mask(getattr(model, "config", None)),
                use_cache=True,
                **{cache_kw: cache},
            )
        return out.logits[:, -1].float()

    return forward


def weights_key(model: Any) -> tuple:
    """Where each weight lives: a captured graph reads these addresses (an in-place update, a
    trainer's step or a LoRA merge, keeps them; new tensors, e.g. bf16 copies, do not)."""
    return tuple((t.data_ptr(), t.dtype) for t in (*model.parameters(), *model.buffers()))


class GraphDecode:
    """Bucketed fixed-shape decode steps over one `StaticSlotKVCache`: per bucket, static input
    buffers and, with `capture`, a CUDA graph of `forward` over them."""

    def __init__(self, forward: Forward, cache: StaticSlotKVCache, buckets: Sequence[int], pad_id: int, capture: bool):
        if buckets[-1] > cache.rows:
            raise ValueError(f"bucket {buckets[-1]} has more rows than the cache ({cache.rows})")
        self.forward, self.cache, self.buckets, self.pad_id = forward, cache, tuple(buckets), pad_id
        self.capture = capture
        self.weights_key: Any = None
        """What the graphs were captured over (the engine's key of the weights' tensors)."""
        self.captures = 0
        """Graphs captured (a bucket's first step, and again after `reset`)."""
        self.steps: Counter[int] = Counter()
        """Decode steps run per bucket."""
        self._inputs: dict[int, torch.Tensor] = {}  # bucket -> (2, bucket, 1): input ids, positions
        self._graphs: dict[int, tuple[Any, torch.Tensor]] = {}  # bucket -> (graph, its output logits)
        self._pool: Any = None

    def reset(self, weights_key: Any) -> None:
        """Drop the captured graphs (they read the weights at their old addresses)."""
        self._graphs.clear()
        self.weights_key = weights_key

    def decode(self, tokens: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
        """(b, V) fp32 logits of running slots 0..b-1, each fed `tokens[i]` at `positions[i]`
        (K/V written there); the step runs in `bucket_for(b)` rows."""
        if max(positions) >= self.cache.length:
            raise ValueError(f"a sequence reached the cache's reserved {self.cache.length} positions")
        bucket = bucket_for(len(tokens), self.buckets)
        ids, pos = pad_to_bucket(tokens, positions, bucket, self.pad_id)
        inputs = self._inputs.get(bucket)
        if inputs is None:
            device = self.cache.keys[0].device  # allocated by the prefill that came before any decode
            inputs = self._inputs[bucket] = torch.zeros((2, bucket, 1), dtype=torch.long, device=device)
        inputs.copy_(torch.tensor([ids, pos])[:, :, None])  # one host-to-device copy per step
        self.steps[bucket] += 1
        if not self.capture:
            return self.forward(inputs[0], inputs[1])[: len(tokens)]
        graph, out = self._graphs.get(bucket) or self._capture(bucket, inputs)
        graph.replay()
        return out[: len(tokens)].clone()  # the next replay overwrites `out`

    def _capture(self, bucket: int, inputs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """Capture `forward` over this bucket's buffers, which hold a real step's inputs."""
        side = torch.cuda.Stream()  # cuda-path: cuda-graphs
        side.wait_stream(torch.cuda.current_stream())  # cuda-path: cuda-graphs
        with torch.cuda.stream(side):  # cuda-path: cuda-graphs
            for _ in range(WARMUP_FORWARDS):
                self.forward(inputs[0], inputs[1])
        torch.cuda.current_stream().wait_stream(side)  # cuda-path: cuda-graphs
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # cuda-path: cuda-graphs (one pool for every bucket)
        graph = torch.cuda.CUDAGraph()  # cuda-path: cuda-graphs
        # thread_local: another thread's CUDA work (a trainer beside the serving thread) may go on meanwhile
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):  # cuda-path: cuda-graphs
            out = self.forward(inputs[0], inputs[1])
        self._graphs[bucket] = (graph, out)
        self.captures += 1
        return graph, out
