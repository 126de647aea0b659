"""`BatchingEngine`: the `Engine` protocol over continuous batching (an HF model in-process).

    engine = BatchingEngine(model, tokenizer, max_slots=64)
    groups = engine.generate(prompts, SamplingParams(n=8, max_new_tokens=64))   # like HFEngine

    engine.start()                                        # serving: a thread runs the batch
    handle = engine.submit(prompt_ids, params, on_token=print)
    completions = handle.result()

Each step (`step`): waiting requests are admitted into free slots and prefilled together
(right-padded, one forward, a prompt's n samples sharing it); the sequences already running
decode one token each in one forward over the slot KV cache (`kvcache.py`); every row is
sampled under its own request's settings; finished sequences leave and their slots are
refilled on the next step. `generate` and the serving thread drive the same `step`.

Long prompts: a `generate` call sizes the slots from its requests (prompt + max_new_tokens,
the answer cut at the model's window); `max_len` bounds what `start` serves. A prompt longer
than `prefill_chunk` leaves the queue and is prefilled one chunk per step (its own
DynamicCache) while the running sequences decode, as many side by side as chunks fit
`max_prefill_tokens`; with one chunk left it rejoins the queue's front and is admitted like
any prompt, its last chunk prefilled over the earlier ones.

Single stream: when the step decodes one sequence alone (a served request with no other in
flight, or a `generate` call of one prompt and one sample), a Llama-family model on CPU
decodes through `models/llama_decode.py` (fused, prepacked weights, no HF module calls) over
the same slot cache; anything it does not serve keeps the HF forward (`single_stream_off`
says why). Prefill (whole or chunked) always runs the HF forward.

CUDA graphs (`cuda_graphs`: off by default; auto: on where the model is on a CUDA device): decode steps run in
batch-size buckets over a fixed-shape slot cache, each bucket's forward captured once as a CUDA
graph and replayed (`rollout/graphs.py`); prefill stays eager. The fixed cache and its graphs
are kept between calls while they hold what a call needs (the graphs point at them).

Same model, tokenizer, identity, precision, LoRA merge and weight sync as `HFEngine` (it is
one, with another `generate`). Greedy output equals running each request alone up to the
floating-point effects of batching: bit-identical in fp32 (tested), while under bf16 a
different batch shape may round differently and flip a near-tie.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from tempering.config import SamplingParams
from tempering.data.padding import right_pad
from tempering.errors import UserError
from tempering.models.llama_decode import LlamaDecoder, unsupported_reason
from tempering.models.precision import autocast
from tempering.models.threads import serving_threads
from tempering.rollout.batching import Request, Scheduler, constrain_rows, prompt_seed, sample_rows, top_rows
from tempering.rollout.constrain import Constraint
from tempering.rollout.engine import Completion, HFEngine, inference_weights
from tempering.rollout.graphs import (
    CUDA_GRAPHS,
    GraphDecode,
    bucket_for,
    cuda_graphs_off,
    decode_buckets,
    decode_forward,
    weights_key,
)
from tempering.rollout.kvcache import LENGTH_STEP, SlotKVCache, StaticSlotKVCache, round_up

__all__ = ["BatchingEngine", "per_position_bytes", "shared_prefix"]

log = logging.getLogger(__name__)

MIN_SHARED_PREFIX = 16
"""Prompts admitted together share a prefill of their common prefix from this many tokens on."""


@dataclass
class _Partial:
    """A long prompt prefilled in chunks: its own cache, holding its first `done` tokens."""

    request: Request
    cache: Any
    done: int = 0


def per_position_bytes(t: torch.Tensor) -> int:
    """Bytes one position of a (B, kv_heads, T, head_dim) K or V tensor holds for one sequence."""
    return t.shape[1] * t.shape[3] * t.element_size()


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of `prompts`, leaving every prompt at least one
    token of its own (its logits come from the last one)."""
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    for i in range(limit):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return max(limit, 0)


class BatchingEngine(HFEngine):
    """`Engine` with continuous batching over `max_slots` concurrent sequences."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        precision: str = "auto",
        max_slots: int = 64,
        max_len: int = 2048,
        max_prefill_tokens: int = 4096,
        max_cache_tokens: int | None = None,
        prefill_chunk: int = 512,
        serve_threads: int | None = None,
        cuda_graphs: str = "off",
    ):
        super().__init__(model, tokenizer, precision=precision)
        if cuda_graphs not in CUDA_GRAPHS:
            raise ValueError(f"cuda_graphs {cuda_graphs!r} is not one of {', '.join(CUDA_GRAPHS)}")
        self.cuda_graphs = cuda_graphs
        """Decode steps as captured CUDA graphs: auto (where the model is on a CUDA device), on, off."""
        self.cuda_graphs_off: str | None = None
        """Why the last cache opened decodes without CUDA graphs (None: with them)."""
        self._graphs: GraphDecode | None = None  # the fixed-shape decode, while the graph path is on
        self._graphs_checked = False  # the weights' tensors were checked since the last admission
        self.serve_threads = serve_threads
        """torch threads of the serving thread (None: `models.threads.serving_threads()`, one core left free)."""
        self.max_slots, self.max_len, self.max_prefill_tokens = max_slots, max_len, max_prefill_tokens
        self.max_cache_tokens = max_cache_tokens
        """KV cache positions the running batch may reserve (rows x longest reach; None: slots x max_len)."""
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        """A longer prompt is prefilled this many tokens a step, between decode steps (chunked prefill)."""
        self._long: deque[Request] = deque()  # prompts past prefill_chunk, waiting for chunked prefill
        self._partials: list[_Partial] = []  # long prompts being prefilled, or with one chunk left
        self.prefill_chunks = 0
        """Chunked-prefill forwards run (each `prefill_chunk` tokens of one long prompt)."""
        self.steps = 0
        """Engine steps run (each: admit, prefill, a token per running sequence, a chunk per long prompt)."""
        self._kv_bytes: int | None = None
        self._lock = threading.RLock()  # held by whoever steps (the serving thread, or `generate`)
        # submitted requests wait here, not on the step lock: a serving thread that re-takes the
        # lock step after step would otherwise keep a submitter out for many steps (CPython's
        # locks are not fair), so requests in a closed loop joined the batch late
        self._inbox: deque[Request] = deque()
        self._wake = threading.Condition()  # its own lock: submit never waits for a step
        self._scheduler: Scheduler | None = None
        self._cache: SlotKVCache | None = None
        self._thread: threading.Thread | None = None
        self._step_started: float | None = None
        self._stopping = False
        self.peak_running = 0
        """The most sequences one step has decoded together (how much batching happened)."""
        self.shared_prefix_tokens = 0
        """Prompt tokens not prefilled because a prompt admitted alongside shared them."""
        self.single_stream_off: str | None = None
        """Why a lone sequence decodes through the HF forward, not `LlamaDecoder` (None: it does not)."""
        self.single_stream_tokens = 0
        """Tokens decoded by `LlamaDecoder` (one sequence alone in the step)."""
        self._single_ok = False  # this call / the serving thread may take the single-stream path
        self._single: tuple[tuple, LlamaDecoder | None] | None = None  # (weights key, decoder)
        self._single_checked = False  # the key was checked since the last admission

    # --- the Engine protocol ---
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Sample `params.n` completions per prompt (token ids), grouped per prompt."""
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError("SamplingParams needs n >= 1 and max_new_tokens >= 1")
        if not prompts:
            return []
        self.check_prompts(prompts)
        out: list[list[Completion]] = [[] for _ in prompts]
        pending = {"left": len(prompts)}

        def done(i: int) -> Callable[[list[Completion]], None]:
            def store(completions: list[Completion]) -> None:
                out[i] = completions
                pending["left"] -= 1

            return store

        budgets = self._answer_budgets(prompts, params.max_new_tokens)
        with self._lock:
            # without a serving thread the cache is sized for this call and freed after (the
            # trainer gets the memory back); with one, the requests join the served batch
            own_cache = self._thread is None
            if own_cache:
                need = max(len(p) + b for p, b in zip(prompts, budgets))
                self._open(min(self.max_slots, max(params.n, len(prompts) * params.n)), need)
            was_training = self.model.training
            self.model.eval()
            # one sequence alone: the whole call decodes single-stream (a batch's tail does not,
            # so a trainer's per-call bf16 weight copies are not repacked for a few tokens)
            if own_cache:
                self._single_ok = len(prompts) * params.n == 1
            try:
                for i, p in enumerate(prompts):
                    update = {"seed": prompt_seed(params.seed, i), "max_new_tokens": budgets[i]}
                    self._open_scheduler.submit(
                        Request(list(p), params.model_copy(update=update), prompt_index=i, done=done(i))
                    )
                with inference_weights(self.model, self.precision):
                    while pending["left"]:
                        self.step()
            finally:
                self.model.train(was_training)
                if own_cache:
                    self._scheduler = self._cache = None
                    self._long, self._partials = deque(), []
        return out

    def _answer_budgets(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[int]:
        """Each prompt's max_new_tokens, cut where prompt + answer would pass the model's window
        (the KV slots of a `generate` call are sized from these, whatever `max_len` says).
        Raises ValueError for a prompt that leaves no position for an answer."""
        window = self.context_window
        if window is None:
            return [max_new_tokens] * len(prompts)
        for i, p in enumerate(prompts):
            if len(p) >= window:
                raise UserError(f"prompt {i} has {len(p)} tokens; the model's window is {window} tokens")
        return [min(max_new_tokens, window - len(p)) for p in prompts]

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K/V one cached position holds across the layers: layers x kv_heads x head_dim x
        (key + value bytes), i.e. layers x 2 x kv_heads x head_dim x dtype bytes where keys and
        values share a dtype (under bf16 autocast over fp32 weights the rotary embedding leaves
        keys in fp32, values bf16). Read off one 1-token forward, once."""
        if self._kv_bytes is None:
            from transformers import DynamicCache

            probe = DynamicCache()
            with self._lock, torch.no_grad(), autocast(self.precision, self.device):
                self.model(
                    input_ids=torch.tensor([[self.pad_id]], device=self.device),
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_kw: probe},
                )
            # after the forward every layer is a filled DynamicLayer (keys, values)
            layers: list[tuple[torch.Tensor, torch.Tensor]] = [(layer.keys, layer.values) for layer in probe.layers]  # pyright: ignore[reportAssignmentType, reportAttributeAccessIssue]
            self._kv_bytes = sum(per_position_bytes(k) + per_position_bytes(v) for k, v in layers)
        return self._kv_bytes

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes the open KV cache holds now (0 with none open or nothing running)."""
        cache = self._cache
        return 0 if cache is None else cache.nbytes

    # --- serving: submit from any thread, a background thread runs the batch ---
    @property
    def step_running_s(self) -> float:
        """Seconds the serving thread's current step has run (0 between steps): a step that never
        ends shows here (the server's `/health`)."""
        started = self._step_started
        return 0.0 if started is None else time.monotonic() - started

    @property
    def serving(self) -> bool:
        """Whether the serving thread runs (`submit` may be called)."""
        return self._thread is not None

    def start(self, max_len: int | None = None) -> None:
        """Start the serving thread (the model is put in eval mode and not trained meanwhile)."""
        with self._lock:
            if self._thread is not None:
                return
            self._open(self.max_slots, max_len or self.max_len)
            self.model.eval()
            self._single_ok = True
            self._stopping = False
            self._thread = threading.Thread(target=self._serve, name="batching-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the serving thread after the current step."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._thread = None
            self._scheduler = self._cache = None
            self._long, self._partials = deque(), []
            self._inbox.clear()

    def submit(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        on_token: Callable[[int, int, float], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Future:
        """Queue one request on the serving thread; the future resolves to its n completions.
        `on_token(sample, token_id, logprob)` is called from the serving thread per token;
        `cancelled()`, polled per token, ends the request early when it turns True."""
        if self._thread is None:
            raise RuntimeError("BatchingEngine.submit needs start() first (or use generate())")
        self.check_prompts([prompt])  # here, not in the step: a bad id there would fail the whole running batch
        future: Future = Future()
        request = Request(
            list(prompt),
            params,
            done=future.set_result,
            on_token=on_token,
            fail=future.set_exception,
            cancelled=cancelled,
        )
        with self._wake:
            self._inbox.append(request)  # the next step admits it
            self._wake.notify_all()
        return future

    def _serve(self) -> None:
        torch.set_num_threads(self.serve_threads or serving_threads())  # this thread's own OpenMP team
        with torch.no_grad(), inference_weights(self.model, self.precision):
            while True:
                with self._wake:
                    while self._idle and not self._stopping:
                        self._wake.wait()
                with self._lock:
                    if self._stopping:
                        return
                    self._step_started = time.monotonic()
                    try:
                        self.step()
                    except Exception as exc:
                        self._fail_all(exc)
                    finally:
                        self._step_started = None
                    if self._idle:  # nothing runs: the K/V memory goes back
                        self._open_cache.release()

    @property
    def _idle(self) -> bool:
        return self._open_scheduler.idle and not self._long and not self._partials and not self._inbox

    def _fail_all(self, exc: Exception) -> None:
        """A step failed: every request in it or waiting gets the error (their futures raise), the
        cache starts empty, and the serving thread goes on with the next requests."""
        sched = self._open_scheduler
        queued = [*sched.waiting, *self._long, *(p.request for p in self._partials)]
        failed = {id(s.request): s.request for s in sched.running} | {id(r): r for r in queued}
        self._long, self._partials = deque(), []
        self._open(self.max_slots, self._open_cache.max_len)
        for req in failed.values():
            if req.fail is not None:
                req.fail(exc)

    @property
    def _open_scheduler(self) -> Scheduler:
        """The scheduler of the open cache (`generate` opens one per call, `start` one for serving)."""
        if self._scheduler is None:
            raise RuntimeError("BatchingEngine: no open cache (use generate(), or start() before submit())")
        return self._scheduler

    @property
    def _open_cache(self) -> SlotKVCache:
        if self._cache is None:
            raise RuntimeError("BatchingEngine: no open cache (use generate(), or start() before submit())")
        return self._cache

    @property
    def graph_steps(self) -> dict[int, int]:
        """Decode steps run on the CUDA-graph path, per batch bucket (empty while it is off)."""
        return dict(self._graphs.steps) if self._graphs is not None else {}

    @property
    def graph_captures(self) -> int:
        """CUDA graphs captured by the current fixed-shape decode (0 while the path is off)."""
        return self._graphs.captures if self._graphs is not None else 0

    # --- one step of the batch ---
    def _open(self, slots: int, max_len: int) -> None:
        reason = cuda_graphs_off(self.cuda_graphs, self.device, getattr(self.model, "config", None))
        if reason != self.cuda_graphs_off and reason is not None:
            log.info("decode steps without CUDA graphs: %s", reason)
        self.cuda_graphs_off = reason
        if reason is None:
            self._cache = self._graph_decode(slots, max_len).cache
        else:
            self._graphs = None
            self._cache = SlotKVCache(slots, max_len)
        self._scheduler = Scheduler(
            slots,
            max_len,
            self.eos_id,
            self._decode,
            constraint_for=lambda grammar: Constraint(self.tokenizer, grammar),
            cache_tokens=self.max_cache_tokens,
        )

    def _graph_decode(self, slots: int, max_len: int) -> GraphDecode:
        """The fixed-shape decode for `slots` sequences of up to `max_len` positions: the one
        kept from earlier calls while it is large enough, else a larger one (graphs captured anew)."""
        buckets = decode_buckets(self.max_slots)
        rows, length = bucket_for(slots, buckets), round_up(max_len, LENGTH_STEP, max(max_len, self.max_len))
        kept = self._graphs
        if kept is not None and kept.cache.rows >= rows and kept.cache.length >= length:
            return kept
        if kept is not None:  # grow, never shrink: a later call of the earlier size reuses this one
            rows, length = max(rows, kept.cache.rows), max(length, kept.cache.length)
        self._graphs, self._graphs_checked = None, False  # the old cache goes before the new one is written
        cache = StaticSlotKVCache(rows, length)
        capture = self.device.type == "cuda"  # cuda-path: cuda-graphs
        forward = decode_forward(self.model, cache, self._cache_kw, self.precision)
        self._graphs = GraphDecode(forward, cache, [b for b in buckets if b <= rows], self.pad_id, capture)
        return self._graphs

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @torch.no_grad()
    def step(self) -> None:
        """Admit, prefill, decode one token for every running sequence, sample, retire; then
        prefill one chunk of each long prompt in progress (each joins once one chunk is left)."""
        sched, cache = self._open_scheduler, self._open_cache
        while self._inbox:  # requests submitted since the last step join the queue
            sched.submit(self._inbox.popleft())
        self.steps += 1
        self._arrange_queue(sched)
        old = len(sched.running)
        admitted = sched.admit()
        if admitted:  # room for every running sequence to reach its limit: no growth mid-decode
            cache.reserve(*sched.reservation())
            self._single_checked = self._graphs_checked = False  # weights may have changed between requests
        self.peak_running = max(self.peak_running, len(sched.running))
        parts = []
        if old:
            parts.append(self._decode_step(old))
        if admitted:
            parts.append(self._prefill(admitted, first_slot=old))
        self._prefill_next_chunks()
        if not parts:
            return
        logits = torch.cat(parts) if len(parts) > 1 else parts[0]
        constrain_rows(logits, sched.running)
        tokens, logprobs = sample_rows(logits, sched.running)
        sched.record(tokens, logprobs, top_rows(logits, sched.running))
        moves, _ = sched.finish()
        for src, dst, length in moves:
            cache.move(src, dst, length)

    def _arrange_queue(self, sched: Scheduler) -> None:
        """Prompts longer than `prefill_chunk` leave the queue for chunked prefill; those with one
        chunk left stand at its front (in the order they came), to be admitted like any prompt."""
        ready = [p.request for p in self._partials if self._left(p) <= self.prefill_chunk]
        ready_ids = {id(r) for r in ready}
        short: list[Request] = []
        for r in sched.waiting:
            if id(r) not in ready_ids:
                (self._long if len(r.prompt) > self.prefill_chunk else short).append(r)
        sched.waiting = deque([*ready, *short])

    def _left(self, partial: _Partial) -> int:
        return len(partial.request.prompt) - partial.done

    def _prefill_next_chunks(self) -> None:
        """Prefill the next `prefill_chunk` tokens of each long prompt in progress, each into
        its own cache; as many are in progress as chunks fit `max_prefill_tokens` (they are
        started first come, first served)."""
        from transformers import DynamicCache

        lanes = max(1, self.max_prefill_tokens // self.prefill_chunk)
        while self._long and len(self._partials) < lanes:
            self._partials.append(_Partial(self._long.popleft(), DynamicCache()))
        for p in self._partials:
            if self._left(p) <= self.prefill_chunk:
                continue  # queued for admission
            end = p.done + self.prefill_chunk
            with autocast(self.precision, self.device):
                self.model(
                    input_ids=torch.tensor([p.request.prompt[p.done : end]], device=self.device),
                    position_ids=torch.arange(p.done, end, device=self.device)[None],
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_kw: p.cache},
                )
            p.done = end
            self.prefill_chunks += 1

    def _decode_step(self, batch: int) -> torch.Tensor:
        """One forward over slots 0..batch-1: each feeds its last token; (batch, V) logits."""
        running = self._open_scheduler.running[:batch]
        graphs = self._graphs
        if graphs is not None:
            if not self._graphs_checked:
                key = weights_key(self.model)
                if key != graphs.weights_key:
                    graphs.reset(key)
                self._graphs_checked = True
            return graphs.decode([s.tokens[-1] for s in running], [s.cached for s in running])
        decoder = self._single_stream_decoder() if batch == 1 else None
        if decoder is not None:
            return self._decode_single(decoder, running[0].tokens[-1], running[0].cached)
        device = self.device
        last = torch.tensor([[s.tokens[-1]] for s in running], device=device)
        cached = [s.cached for s in running]
        write_at = torch.tensor(cached, device=device)
        self._open_cache.bind(write_at, max(cached))
        with autocast(self.precision, device):
            out = self.model(
                input_ids=last,
                position_ids=write_at[:, None],
                attention_mask=self._open_cache.decode_mask(getattr(self.model, "config", None)),
                use_cache=True,
                **{self._cache_kw: self._cache},
            )
        return out.logits[:, -1].float()

    def _decode_single(self, decoder: LlamaDecoder, token: int, pos: int) -> torch.Tensor:
        """Slot 0's next-token logits (1, V) through `decoder`, over slot 0 of the cache."""
        cache = self._open_cache
        if pos >= cache.length:
            raise ValueError(f"a sequence reached the cache's reserved {cache.length} positions")
        self.single_stream_tokens += 1
        token_ids = torch.tensor([token], device=self.device)
        return decoder.step(token_ids, pos, [k[:1] for k in cache.keys], [v[:1] for v in cache.values])

    def _single_stream_decoder(self) -> LlamaDecoder | None:
        """The decoder over the weights as they are now, or None where the HF forward decodes.
        Whether a parameter changed (another object, or an in-place update) is checked once per
        admission, not per token (walking the parameters costs ~0.6 ms, 5% of a step)."""
        if not self._single_ok:
            return None
        if self._single is not None and self._single_checked:
            return self._single[1]
        positions = max(self.max_len, self._open_cache.max_len)
        tensors = [*self.model.parameters(), *self.model.buffers()]
        key = (positions, *((id(t), t._version) for t in tensors))
        if self._single is None or self._single[0] != key:
            reason = unsupported_reason(self.model)
            if reason is None and self.device.type != "cpu":  # cuda-path: engine-cuda
                reason = f"device {self.device.type} (measured on CPU only)"
            if reason is not None and reason != self.single_stream_off:
                log.info("single-stream decode keeps the HF forward: %s", reason)
            self.single_stream_off = reason
            self._single = (key, None if reason else LlamaDecoder(self.model, positions))
        self._single_checked = True
        return self._single[1]

    def _prefill(self, requests: list[Request], first_slot: int) -> torch.Tensor:
        """Prefill new prompts (right-padded, in chunks of at most `max_prefill_tokens`) into
        their slots; returns (sum of n, V) logits, one row per new sequence, in slot order."""
        rows, slot = [], first_slot
        for req in requests:
            rows.append(list(range(slot, slot + req.params.n)))
            slot += req.params.n
        out, start = [], 0
        chunked = {id(p.request) for p in self._partials}
        while start < len(requests):
            end = start + 1
            width = len(requests[start].prompt)
            while (
                end < len(requests)
                and id(requests[start]) not in chunked
                and id(requests[end]) not in chunked
                and max(width, len(requests[end].prompt)) * (end + 1 - start) <= self.max_prefill_tokens
            ):
                width = max(width, len(requests[end].prompt))
                end += 1
            out.append(self._prefill_chunk(requests[start:end], rows[start:end]))
            start = end
        return torch.cat(out)

    def _prefill_chunk(self, requests: list[Request], rows_to_slots: list[list[int]]) -> torch.Tensor:
        from transformers import DynamicCache

        lengths = [len(r.prompt) for r in requests]
        # prompts admitted together that open alike (a system prompt, few-shot examples) share
        # one forward over the common prefix; each row then prefills only its own suffix
        shared = shared_prefix([r.prompt for r in requests])
        shared = shared if len(requests) > 1 and shared >= MIN_SHARED_PREFIX else 0
        prefill = DynamicCache()
        partial = next((p for p in self._partials if p.request is requests[0]), None)
        if partial is not None:
            # a long prompt's last chunk (alone in its group): its earlier chunks are cached
            prefill, shared = partial.cache, partial.done
            self._partials.remove(partial)
        elif shared:
            with autocast(self.precision, self.device):
                self.model(
                    input_ids=torch.tensor([requests[0].prompt[:shared]], device=self.device),
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_kw: prefill},
                )
            prefill.batch_repeat_interleave(len(requests))
            self.shared_prefix_tokens += shared * (len(requests) - 1)
        width = max(lengths) - shared
        ids = right_pad([r.prompt[shared:] for r in requests], self.pad_id, width=width)[0].to(self.device)
        positions = (shared + torch.arange(width, device=self.device)).expand(len(requests), -1)
        # right padding: causal attention keeps pads (after each prompt) out of its K/V and logits
        keep = torch.tensor(sorted({n - 1 - shared for n in lengths}), device=self.device)
        with autocast(self.precision, self.device):
            logits = self.model(
                input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=keep, **{self._cache_kw: prefill}
            ).logits
        # after the forward every layer of this DynamicCache is a filled DynamicLayer (keys, values)
        layer_kv = [(layer.keys, layer.values) for layer in prefill.layers]  # pyright: ignore[reportAttributeAccessIssue]
        self._open_cache.write_prefill(layer_kv, rows_to_slots, lengths)  # pyright: ignore[reportArgumentType]
        col = {int(p): j for j, p in enumerate(keep.tolist())}
        picked = torch.stack([logits[i, col[n - 1 - shared]] for i, n in enumerate(lengths)]).float()
        counts = torch.tensor([len(s) for s in rows_to_slots], device=picked.device)
        return picked.repeat_interleave(counts, dim=0)
