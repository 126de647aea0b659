"""Continuous batching, the scheduling half: which sequences run, in which slot, and when
they finish. No model here; `batching_engine.py` runs the forwards this decides.

Requests join the running batch between two decode steps (as soon as `n` slots are free:
a prompt's n samples share one prefill) and leave it the step they finish, each with its
own sampling settings, stop tokens and strings, token limit and seed. The running
sequences always occupy slots 0..B-1: when one leaves, the last one moves into its slot
(`finish` returns the moves for the cache to copy), so a decode step reads one contiguous
view of the KV cache.

Seeds: a request with a seed gives each sample its own generator, seeded from
(seed, sample index), so its output does not depend on what else shares the batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from tempering.config import SamplingParams
from tempering.rollout.engine import (
    Completion,
    cut_at_stop,
    host_lists,
    prompt_seed,
    row_uniforms,
    sample_seed,
    sample_tokens,
    top_logprobs,
)

__all__ = ["Request", "Running", "Scheduler", "constrain_rows", "prompt_seed", "sample_rows", "sample_seed", "top_rows"]


@dataclass
class Request:
    """One prompt and its `params.n` samples; `done` is called once with all of them."""

    prompt: list[int]
    params: SamplingParams
    prompt_index: int = 0
    done: Callable[[list[Completion]], None] | None = None
    on_token: Callable[[int, int, float], None] | None = None
    """Streaming hook: (sample index, token id, log-prob) for every sampled token."""
    fail: Callable[[BaseException], None] | None = None
    """Called instead of `done` when the step running this request failed (serving thread)."""
    cancelled: Callable[[], bool] | None = None
    """Polled after each sampled token: True ends the request's samples there (finish reason
    `cancelled`) and frees their slots, e.g. when a streaming client has left."""
    completions: list[Completion | None] = field(default_factory=list)
    constraints: list[Any] = field(default_factory=list)
    """Each sample's place in `params.grammar` (made by `Scheduler.submit`; empty without one)."""


@dataclass
class Running:
    """A sequence in a slot: one sample of a request."""

    request: Request
    sample: int
    generator: torch.Generator | None
    stop_ids: frozenset[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    constraint: Any = None
    """The sample's place in its request's grammar (`constrain.Constraint`), if it has one."""

    @property
    def cached(self) -> int:
        """Positions in the KV cache: the prompt and every sampled token but the last."""
        return len(self.request.prompt) + len(self.tokens) - 1

    @property
    def reach(self) -> int:
        """The most KV cache positions this sequence can need (prompt + max_new_tokens)."""
        return request_reach(self.request)


def request_reach(request: Request) -> int:
    """KV cache positions one sample of `request` can need: its prompt + max_new_tokens."""
    return len(request.prompt) + request.params.max_new_tokens


class Scheduler:
    """Admits waiting requests into free slots, records sampled tokens, retires finished
    sequences. `decode` turns token ids into text (stop strings, completion text).

    `cache_tokens` bounds the KV cache the running batch may reserve: rows x the longest
    `reach` among them (the cache is rectangular). A request that would pass it waits until
    sequences leave; one that alone passes it is refused at `submit`. None: slots x max_len."""

    def __init__(
        self,
        slots: int,
        max_len: int,
        eos_id: int | None,
        decode: Callable[[list[int]], str],
        constraint_for: Callable[[str], Any] | None = None,
        cache_tokens: int | None = None,
    ):
        self.slots, self.max_len = slots, max_len
        self.cache_tokens = slots * max_len if cache_tokens is None else cache_tokens
        self.eos_id, self.decode = eos_id, decode
        self.constraint_for = constraint_for
        """Makes a sample's `Constraint` from a request's grammar (None: grammars are refused)."""
        self.waiting: deque[Request] = deque()
        self.running: list[Running] = []

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def submit(self, request: Request) -> None:
        """Queue a request; refuses one that can never fit."""
        p = request.params
        if p.n > self.slots:
            raise ValueError(f"a request for n={p.n} samples needs more slots than the engine has ({self.slots})")
        if not request.prompt:
            raise ValueError("empty prompt: a request needs at least one token")
        if p.grammar is not None:
            if self.constraint_for is None:
                raise ValueError("this scheduler has no constrained decoding (grammar given)")
            # one per sample, made here so a grammar that does not compile fails in the caller
            request.constraints = [self.constraint_for(p.grammar) for _ in range(p.n)]
        need = len(request.prompt) + p.max_new_tokens
        if need > self.max_len:
            raise ValueError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens ({p.max_new_tokens}) "
                f"exceeds the KV cache's max_len {self.max_len}"
            )
        if p.n * need > self.cache_tokens:
            raise ValueError(
                f"{p.n} samples of prompt + max_new_tokens = {need} tokens exceed the KV cache budget "
                f"of {self.cache_tokens} tokens (engine max_cache_tokens)"
            )
        request.completions = [None] * p.n
        self.waiting.append(request)

    def admit(self) -> list[Request]:
        """Move waiting requests (first come, first served) into free slots; their sequences
        are appended to `running` in sample order. Returns the admitted requests."""
        admitted = []
        while self.waiting and self._fits(self.waiting[0]):
            req = self.waiting.popleft()
            stops = frozenset(req.params.stop_token_ids) | ({self.eos_id} if self.eos_id is not None else frozenset())
            for j in range(req.params.n):
                gen = None
                if req.params.seed is not None:
                    gen = torch.Generator().manual_seed(sample_seed(req.params.seed, j))
                constraint = req.constraints[j] if req.constraints else None
                self.running.append(Running(req, j, gen, stops, constraint=constraint))
            admitted.append(req)
        return admitted

    def _fits(self, req: Request) -> bool:
        rows = len(self.running) + req.params.n
        longest = max([request_reach(req)] + [s.reach for s in self.running])
        return rows <= self.slots and rows * longest <= self.cache_tokens

    def reservation(self) -> tuple[int, int]:
        """(rows, positions) the KV cache needs for the running sequences to finish."""
        return len(self.running), max((s.reach for s in self.running), default=0)

    def record(
        self,
        tokens: Sequence[int],
        logprobs: Sequence[float],
        tops: Sequence[list[tuple[int, float]] | None] | None = None,
    ) -> None:
        """Append each running sequence's sampled token (row i -> running[i]) and, for requests
        that asked, its most likely alternatives (`tops`, from `top_rows`); mark finishes."""
        for i, (seq, tok, lp) in enumerate(zip(self.running, tokens, logprobs)):
            seq.tokens.append(tok)
            seq.logprobs.append(lp)
            top = tops[i] if tops is not None else None
            if top is not None:
                seq.tops.append(top)
            if seq.request.on_token is not None:
                seq.request.on_token(seq.sample, tok, lp)
            params = seq.request.params
            grammar_ends = (
                seq.constraint is not None
                and tok not in seq.stop_ids
                and (not seq.constraint.accept(tok) or seq.constraint.done)
            )
            if seq.request.cancelled is not None and seq.request.cancelled():
                seq.finish_reason = "cancelled"
            elif tok in seq.stop_ids or grammar_ends:
                seq.finish_reason = "stop"
            elif params.stop and self._stop_string_hit(seq):
                seq.finish_reason = "stop"
            elif len(seq.tokens) >= params.max_new_tokens:
                seq.finish_reason = "length"

    def _stop_string_hit(self, seq: Running) -> bool:
        # only the tail that can hold a stop string is decoded (plus slack for split bytes)
        window = max(len(s) for s in seq.request.params.stop) + 4
        tail = self.decode([t for t in seq.tokens[-window:] if t not in seq.stop_ids])
        return any(s in tail for s in seq.request.params.stop)

    def finish(self) -> tuple[list[tuple[int, int, int]], list[Request]]:
        """Retire finished sequences. Returns the cache moves (src slot, dst slot, positions)
        that keep the running slots contiguous, and the requests now complete."""
        moves, completed = [], []
        for slot in range(len(self.running) - 1, -1, -1):
            seq = self.running[slot]
            if seq.finish_reason is None:
                continue
            req = seq.request
            req.completions[seq.sample] = self._completion(seq)
            if all(c is not None for c in req.completions):
                completed.append(req)
            last = self.running.pop()
            if slot < len(self.running):  # the popped last sequence takes the freed slot
                self.running[slot] = last
                moves.append((len(self.running), slot, last.cached))
        for req in completed:
            if req.done is not None:
                req.done(list(req.completions))
        return moves, completed

    def _completion(self, seq: Running) -> Completion:
        text = self.decode([t for t in seq.tokens if t not in seq.stop_ids])
        text, cut = cut_at_stop(text, seq.request.params.stop)
        assert seq.finish_reason is not None  # only finished sequences complete (see finish)
        reason = "stop" if cut else seq.finish_reason
        return Completion(
            seq.request.prompt_index,
            seq.tokens,
            seq.logprobs,
            text,
            reason,
            seq.tops if seq.request.params.top_logprobs else None,
        )


def constrain_rows(logits: torch.Tensor, rows: Sequence[Running]) -> None:
    """Mask, in place, each constrained row's logits to the tokens its grammar allows next."""
    for i, seq in enumerate(rows):
        if seq.constraint is not None:
            seq.constraint.restrict(logits[i])


def top_rows(logits: torch.Tensor, rows: Sequence[Running]) -> list[list[tuple[int, float]] | None] | None:
    """Per row of (B, V) logits, the `top_logprobs` most likely (token, log-prob) under the
    row's request's temperature (engine.top_logprobs), or None where it did not ask; None when no row did."""
    if not any(seq.request.params.top_logprobs for seq in rows):
        return None
    out: list[list[tuple[int, float]] | None] = []
    for i, seq in enumerate(rows):
        p = seq.request.params
        out.append(top_logprobs(logits[i : i + 1], p.temperature, p.top_logprobs)[0] if p.top_logprobs else None)
    return out


def sample_rows(logits: torch.Tensor, rows: Sequence[Running]) -> tuple[list[int], list[float]]:
    """Sample each row of (B, V) logits under its own sequence's settings with `sample_tokens`
    (the engines' one sampler). Rows sharing temperature and top_p are sampled in one call;
    each row's random draw comes from its own generator (or the global one when unseeded),
    so a seeded sequence samples the same tokens whatever else shares the batch."""
    groups: dict[tuple[float, float], list[int]] = {}
    for i, seq in enumerate(rows):
        p = seq.request.params
        groups.setdefault((p.temperature, p.top_p), []).append(i)
    tokens = torch.empty(len(rows), dtype=torch.long)
    logps = torch.empty(len(rows))
    for (temperature, top_p), idx in groups.items():
        uniforms = None
        if temperature > 0:
            uniforms = row_uniforms([rows[i].generator for i in idx])
        if len(idx) == len(rows):  # the usual case: one setting for the whole batch
            return host_lists(*sample_tokens(logits, temperature, top_p, None, uniforms=uniforms))
        tok, lp = sample_tokens(logits[idx], temperature, top_p, None, uniforms=uniforms)
        tokens[idx], logps[idx] = tok.cpu(), lp.cpu()
    return tokens.tolist(), logps.tolist()
