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

Single stream: when the step decodes one sequence alone (a served request with no other in
flight, or a `generate` call of one prompt and one sample), a Llama-family model on CPU
decodes through `models/llama_decode.py` (fused, prepacked weights, no HF module calls) over
the same slot cache; anything it does not serve keeps the HF forward (`single_stream_off`
says why). Prefill always runs the HF forward.

Same model, tokenizer, identity, precision, LoRA merge and weight sync as `HFEngine` (it is
one, with another `generate`). Greedy output equals running each request alone up to the
floating-point effects of batching: bit-identical in fp32 (tested), while under bf16 a
different batch shape may round differently and flip a near-tie.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any, Callable, Sequence

import torch

from tempering.config import SamplingParams
from tempering.models.llama_decode import LlamaDecoder, unsupported_reason
from tempering.models.precision import autocast
from tempering.rollout.batching import Request, Scheduler, constrain_rows, prompt_seed, sample_rows, top_rows
from tempering.rollout.constrain import Constraint
from tempering.rollout.engine import Completion, HFEngine, inference_weights
from tempering.rollout.kvcache import SlotKVCache

__all__ = ["BatchingEngine", "shared_prefix"]

log = logging.getLogger(__name__)

MIN_SHARED_PREFIX = 16
"""Prompts admitted together share a prefill of their common prefix from this many tokens on."""


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
    ):
        super().__init__(model, tokenizer, precision=precision)
        self.max_slots, self.max_len, self.max_prefill_tokens = max_slots, max_len, max_prefill_tokens
        self.max_cache_tokens = max_cache_tokens
        """KV cache positions the running batch may reserve (rows x longest reach; None: slots x max_len)."""
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._scheduler: Scheduler | None = None
        self._cache: SlotKVCache | None = None
        self._thread: threading.Thread | None = None
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
        out: list[list[Completion]] = [[] for _ in prompts]
        pending = {"left": len(prompts)}

        def done(i: int) -> Callable[[list[Completion]], None]:
            def store(completions: list[Completion]) -> None:
                out[i] = completions
                pending["left"] -= 1

            return store

        with self._lock:
            # without a serving thread the cache is sized for this call and freed after (the
            # trainer gets the memory back); with one, the requests join the served batch
            own_cache = self._thread is None
            if own_cache:
                need = max(len(p) for p in prompts) + params.max_new_tokens
                self._open(min(self.max_slots, max(params.n, len(prompts) * params.n)), need)
            was_training = self.model.training
            self.model.eval()
            # one sequence alone: the whole call decodes single-stream (a batch's tail does not,
            # so a trainer's per-call bf16 weight copies are not repacked for a few tokens)
            if own_cache:
                self._single_ok = len(prompts) * params.n == 1
            try:
                for i, p in enumerate(prompts):
                    seed = prompt_seed(params.seed, i)
                    self._open_scheduler.submit(
                        Request(list(p), params.model_copy(update={"seed": seed}), prompt_index=i, done=done(i))
                    )
                with inference_weights(self.model, self.precision):
                    while pending["left"]:
                        self.step()
            finally:
                self.model.train(was_training)
                if own_cache:
                    self._scheduler = self._cache = None
        return out

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes the open KV cache holds now (0 with none open or nothing running)."""
        cache = self._cache
        return 0 if cache is None else cache.nbytes

    # --- serving: submit from any thread, a background thread runs the batch ---
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
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._thread = None
            self._scheduler = self._cache = None

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
        future: Future = Future()
        with self._lock:
            self._open_scheduler.submit(
                Request(
                    list(prompt),
                    params,
                    done=future.set_result,
                    on_token=on_token,
                    fail=future.set_exception,
                    cancelled=cancelled,
                )
            )
            self._wake.notify_all()
        return future

    def _serve(self) -> None:
        with torch.no_grad(), inference_weights(self.model, self.precision):
            while True:
                with self._lock:
                    while self._open_scheduler.idle and not self._stopping:
                        self._wake.wait()
                    if self._stopping:
                        return
                    try:
                        self.step()
                    except Exception as exc:
                        self._fail_all(exc)
                    if self._open_scheduler.idle:  # nothing runs: the K/V memory goes back
                        self._open_cache.release()

    def _fail_all(self, exc: Exception) -> None:
        """A step failed: every request in it or waiting gets the error (their futures raise), the
        cache starts empty, and the serving thread goes on with the next requests."""
        sched = self._open_scheduler
        failed = {id(s.request): s.request for s in sched.running} | {id(r): r for r in sched.waiting}
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

    # --- one step of the batch ---
    def _open(self, slots: int, max_len: int) -> None:
        self._cache = SlotKVCache(slots, max_len)
        self._scheduler = Scheduler(
            slots,
            max_len,
            self.eos_id,
            self._decode,
            constraint_for=lambda grammar: Constraint(self.tokenizer, grammar),
            cache_tokens=self.max_cache_tokens,
        )

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @torch.no_grad()
    def step(self) -> None:
        """Admit, prefill, decode one token for every running sequence, sample, retire."""
        sched, cache = self._open_scheduler, self._open_cache
        old = len(sched.running)
        admitted = sched.admit()
        if admitted:  # room for every running sequence to reach its limit: no growth mid-decode
            cache.reserve(*sched.reservation())
            self._single_checked = False  # weights may have changed between requests
        self.peak_running = max(self.peak_running, len(sched.running))
        parts = []
        if old:
            parts.append(self._decode_step(old))
        if admitted:
            parts.append(self._prefill(admitted, first_slot=old))
        if not parts:
            return
        logits = torch.cat(parts) if len(parts) > 1 else parts[0]
        constrain_rows(logits, sched.running)
        tokens, logprobs = sample_rows(logits, sched.running)
        sched.record(tokens, logprobs, top_rows(logits, sched.running))
        moves, _ = sched.finish()
        for src, dst, length in moves:
            cache.move(src, dst, length)

    def _decode_step(self, batch: int) -> torch.Tensor:
        """One forward over slots 0..batch-1: each feeds its last token; (batch, V) logits."""
        running = self._open_scheduler.running[:batch]
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
                attention_mask=self._open_cache.decode_mask(),
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
            if reason is None and self.device.type != "cpu":
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
        while start < len(requests):
            end = start + 1
            width = len(requests[start].prompt)
            while (
                end < len(requests)
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
        if shared:
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
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        for i, r in enumerate(requests):
            ids[i, : lengths[i] - shared] = torch.tensor(r.prompt[shared:])
        ids = ids.to(self.device)
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
