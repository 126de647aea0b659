"""Stability info of `temper tinker serve`: what `sample(record_stability_info=True)` records
per sampled sequence, and the provenance check of a `forward_backward` that trains on it.

A recorded sequence is its request's prompt, its sampled tokens and the log-prob the sampler
gave each of them, under the `sequence_id` the SDK returned, owned by the key that sampled it
(another key finds nothing). As on Tinker, a record may be trained on for a day after its last
use; past `max_tokens` recorded tokens in all (prompt and sampled), the least recently used are
dropped.

A datum names its sources with provenance spans (`Datum.with_provenance`): runs tiling its
input tokens and its targets, each "positions [offset, offset + length) of sequence S's prompt
(or of its sampled tokens)". Every claim is checked against the record, token by token, so a
loss that trains on recorded log-probs (`stable_reinforce`) can only be given the sampler's
own tokens.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from tempering.serve.tinker_ops import UserError
from tempering.serve.tinker_wire import Span, WireDatum

KEEP_S = 24 * 3600.0
"""A record is dropped this long after it was sampled or last trained on (Tinker's day)."""


@dataclass
class Recorded:
    owner: str
    prompt: np.ndarray  # (P,) int32, shared by the samples of one request
    tokens: np.ndarray  # (S,) int32
    logprobs: np.ndarray  # (S,) float32, as the sampler computed them
    used: float  # time.monotonic() of its sampling or its last training use

    @property
    def size(self) -> int:
        """Tokens it counts against the cap: its prompt's and its own (a shared prompt counts for each)."""
        return len(self.prompt) + len(self.tokens)


class StabilityRecords:
    """Recorded sequences by `sequence_id`, bounded in tokens and time; thread-safe."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self._records: OrderedDict[str, Recorded] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def record(self, owner: str, ids: list[str], prompt: list[int], samples: list) -> None:
        """Keep each sample (`.tokens`, `.logprobs`) under its id for `owner`."""
        shared, now = np.asarray(prompt, dtype=np.int32), time.monotonic()
        with self._lock:
            for sequence_id, s in zip(ids, samples, strict=True):
                tokens, logprobs = np.asarray(s.tokens, np.int32), np.asarray(s.logprobs, np.float32)
                self._records[sequence_id] = Recorded(owner, shared, tokens, logprobs, now)
                self._tokens += self._records[sequence_id].size
            self._trim()

    def _trim(self) -> None:
        now = time.monotonic()
        while self._records:
            oldest = next(iter(self._records.values()))
            if self._tokens <= self.max_tokens and now - oldest.used <= KEEP_S:
                break
            self._tokens -= self._records.popitem(last=False)[1].size

    def _get(self, owner: str, sequence_id: str, where: str) -> Recorded:
        with self._lock:
            self._trim()
            found = self._records.get(sequence_id)
            if found is None or found.owner != owner:
                raise UserError(
                    f"forward_backward: {where} names sequence {sequence_id!r}, which this server has no record of "
                    "(sample with record_stability_info=True under the same key; records last a day)"
                )
            found.used = time.monotonic()
            self._records.move_to_end(sequence_id)
            return found

    def sampled(self, owner: str, i: int, datum: WireDatum) -> dict[str, np.ndarray]:
        """`sampled` (1 where the datum's targets are sampled tokens) and `sampler_logprobs` (their
        recorded log-probs, 0 elsewhere), both (T,), after checking every span against the records.

        Raises:
            UserError: no provenance, spans that do not tile, a sequence not recorded for `owner`,
                a claimed token that is not the recorded one, an advantage on a prompt token.
        """
        n = len(datum.tokens)
        if not datum.target_spans:
            raise UserError(
                f"forward_backward: data[{i}] has no provenance; this loss trains on recorded samples "
                "(sample with record_stability_info=True, then Datum.with_provenance)"
            )
        self._check(owner, datum.input_spans, datum.tokens, f"data[{i}].model_input_spans")
        targets = datum.inputs["target_tokens"].astype(np.int64)
        sampled, recorded = np.zeros(n, np.float32), np.zeros(n, np.float32)
        for start, span, rec in self._check(owner, datum.target_spans, targets, f"data[{i}].loss_fn_input_spans"):
            if span.sampled:
                sampled[start : start + span.length] = 1.0
                recorded[start : start + span.length] = rec.logprobs[span.offset : span.offset + span.length]
        advantages = datum.inputs["advantages"]
        if np.any(advantages[sampled == 0] != 0):
            p = int(np.flatnonzero((advantages != 0) & (sampled == 0))[0])
            raise UserError(
                f"forward_backward: data[{i}] has an advantage at position {p}, a prompt token (only sampled tokens train)"
            )
        return {"sampled": sampled, "sampler_logprobs": recorded}

    def _check(self, owner: str, spans: list[Span], tokens, where: str) -> list[tuple[int, Span, Recorded]]:
        """(start position, span, record) of each span, once it is known they tile `tokens` and
        every token they claim is the recorded one."""
        if spans and sum(s.length for s in spans) != len(tokens):
            raise UserError(
                f"forward_backward: {where} cover {sum(s.length for s in spans)} positions, not {len(tokens)}"
            )
        found, start = [], 0
        for k, span in enumerate(spans):
            rec = self._get(owner, span.sequence_id, f"{where}[{k}]")
            source = rec.tokens if span.sampled else rec.prompt
            claimed = np.asarray(tokens[start : start + span.length], dtype=np.int64)
            if span.offset + span.length > len(source) or np.any(
                source[span.offset : span.offset + span.length] != claimed
            ):
                what = "sampled tokens" if span.sampled else "prompt"
                raise UserError(
                    f"forward_backward: {where}[{k}] claims positions {start}..{start + span.length - 1} are "
                    f"{what}[{span.offset}:{span.offset + span.length}] of {span.sequence_id!r}; they are not"
                )
            found.append((start, span, rec))
            start += span.length
        return found
