"""Partial rollouts: one generation in segments, the engine's weights free to change between them.

    segmented = SegmentedEngine(engine, segment_tokens=64, newer_weights=hook, version=v, decode=tok.decode)
    groups = segmented.generate(prompts, params)     # Completions with per-token `versions`

A long generation that started under version v need not finish under v: after every segment of
`segment_tokens` new tokens, `newer_weights()` is called (it may sync newer weights into the
engine) and returns the version the engine now holds; the next segment samples under it. Each
token keeps the version of the weights that produced it (`Completion.versions`) and its engine
log-prob, so the trainer's importance ratio is taken against the policy that sampled it.

Each segment is one `engine.generate` call through the `Engine` protocol: segment 0 samples
`params.n` completions of each prompt; a later segment continues each unfinished completion as
its own prompt (prompt + the tokens so far, n = 1). A completion stops as a one-shot generation
would: on a stop token or a completed stop string (one that spans a segment boundary is found
with `decode`, over the same window of tokens the engine reads) or at `max_new_tokens`. The text
is the segments' texts joined (a character split across a boundary decodes there as the
engine decodes a split token). Segment k is seeded `sample_seed(seed, k)` (segment 0: the seed
itself), so a seeded call is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tempering.config import SamplingParams
from tempering.rollout.engine import Completion, Engine, ImagePrompt, cut_at_stop, sample_seed
from tempering.versions import Version

WeightsHook = Callable[[], Version]
"""Called between segments: may sync newer weights into the engine; returns the version it now holds."""


@dataclass
class _Row:
    """One completion being generated."""

    prompt_index: int
    prompt: Sequence[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)
    text: str = ""
    finish: str | None = None

    def extend(self, c: Completion, version: Version) -> None:
        self.tokens += c.token_ids
        self.logprobs += c.logprobs
        self.versions += [version] * len(c.token_ids)
        self.text += c.text
        if c.finish_reason == "stop":
            self.finish = "stop"

    def continued(self) -> list[int]:
        """The prompt of the next segment: the prompt and the tokens so far (an image prompt keeps its pixels)."""
        ids = [*self.prompt, *self.tokens]
        return ImagePrompt(ids, self.prompt.pixels) if isinstance(self.prompt, ImagePrompt) else ids

    def completion(self) -> Completion:
        return Completion(
            self.prompt_index, self.tokens, self.logprobs, self.text, self.finish or "length", versions=self.versions
        )


class SegmentedEngine:
    """An `Engine` whose `generate` runs in segments of `segment_tokens`, calling `newer_weights`
    between them; everything else is the wrapped engine's. `version`: what the engine holds now."""

    def __init__(
        self,
        engine: Engine,
        segment_tokens: int,
        newer_weights: WeightsHook,
        version: Version,
        decode: Callable[[list[int]], str] | None = None,
    ):
        if segment_tokens < 1:
            raise ValueError(f"segment_tokens must be >= 1, got {segment_tokens}")
        self.engine, self.segment_tokens, self.newer_weights = engine, segment_tokens, newer_weights
        self.version, self.decode = version, decode
        self.precision = engine.precision

    @property
    def identity(self) -> str:
        return self.engine.identity

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        return self.engine.chat_prompt(messages)

    def sync_weights(self, weights: Any) -> None:
        self.engine.sync_weights(weights)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        if params.top_logprobs:
            raise ValueError("partial rollouts report no top_logprobs (each segment is its own call)")
        if params.stop and self.decode is None:
            raise ValueError("partial rollouts with stop strings need `decode` (a stop string may span segments)")
        first = min(self.segment_tokens, params.max_new_tokens)
        groups = self.engine.generate(prompts, params.model_copy(update={"max_new_tokens": first}))
        rows: list[list[_Row]] = []
        for i, group in enumerate(groups):
            rows.append([self._grown(_Row(i, prompts[i]), c, self.version, params) for c in group])
        segment = 1
        while live := [r for group in rows for r in group if r.finish is None]:
            version = self.version = self.newer_weights()
            take = min(self.segment_tokens, params.max_new_tokens - len(live[0].tokens))
            seed = None if params.seed is None else sample_seed(params.seed, segment)
            step = params.model_copy(update={"n": 1, "max_new_tokens": take, "seed": seed})
            for r, group in zip(live, self.engine.generate([r.continued() for r in live], step)):
                self._grown(r, group[0], version, params)
            segment += 1
        return [[r.completion() for r in group] for group in rows]

    def _grown(self, row: _Row, c: Completion, version: Version, params: SamplingParams) -> _Row:
        """`row` with one segment's completion appended, finished where a one-shot generation would be."""
        before = len(row.tokens)
        row.extend(c, version)
        if row.finish is None and params.stop and before and self.decode is not None:
            cut = boundary_stop(row.tokens[:before], c.token_ids, params.stop, self.decode)
            if cut is not None:
                del row.tokens[before + cut :], row.logprobs[before + cut :], row.versions[before + cut :]
                row.text = row.text[: len(row.text) - len(c.text)] + self.decode(c.token_ids[:cut])
                row.finish = "stop"
        if row.finish is None and len(row.tokens) >= params.max_new_tokens:
            row.finish = "length"
        row.text = cut_at_stop(row.text, params.stop)[0]
        return row


def boundary_stop(
    before: list[int], new: list[int], stop: Sequence[str], decode: Callable[[list[int]], str]
) -> int | None:
    """How many of a segment's `new` tokens a one-shot generation would have kept: the first m whose
    decoded tail (the engine's window: the longest stop string + 4 tokens) holds a stop string that
    starts before the segment; None when none completes there (the engine found those inside it)."""
    window = max(len(s) for s in stop) + 4
    for m in range(1, min(len(new), window) + 1):
        tail = [*before, *new[:m]][-window:]
        if any(s in decode(tail) for s in stop):
            return m
    return None
