"""Attacks on the stability records of `temper tinker serve` (`serve/tinker_records.py`): what
`sample(record_stability_info=True)` keeps and `stable_reinforce` trains on. A client may not
train on another key's samples, may not pass its own tokens off as sampled ones (the loss would
then read the sampler's log-probs for tokens the sampler never drew), and cannot grow the
records without bound."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tempering.serve import tinker_records
from tempering.serve.tinker_ops import UserError
from tempering.serve.tinker_records import StabilityRecords
from tempering.serve.tinker_wire import Span, WireDatum

PROMPT = [5, 6, 7]
SAMPLED = [8, 9]
LOGPROBS = [-0.25, -1.5]


def recorded(max_tokens: int = 1000) -> StabilityRecords:
    records = StabilityRecords(max_tokens)
    records.record("alice", ["seq-a"], PROMPT, [SimpleNamespace(tokens=SAMPLED, logprobs=LOGPROBS)])
    return records


def datum(
    targets: list[int], target_spans: list[Span], advantages: list[float] | None = None, sid: str = "seq-a"
) -> WireDatum:
    """Input = prompt + all but the last sampled token; targets shifted by one (the cookbook's datum)."""
    tokens = PROMPT + SAMPLED[:-1]
    inputs = {
        "target_tokens": np.asarray(targets, np.int64),
        "logprobs": np.zeros(len(tokens), np.float32),
        "advantages": np.asarray(advantages or [0.0, 0.0, 1.0, 1.0], np.float32),
    }
    spans = [Span(False, sid, 0, 3), Span(True, sid, 0, 1)]
    return WireDatum(tokens, inputs, spans, target_spans)


def honest(sid: str = "seq-a") -> list[Span]:
    return [Span(False, sid, 1, 2), Span(True, sid, 0, 2)]


HONEST = honest()


def test_the_owner_gets_the_recorded_log_probs_of_the_sampled_targets():
    out = recorded().sampled("alice", 0, datum([6, 7, 8, 9], HONEST))
    assert out["sampled"].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert out["sampler_logprobs"].tolist() == [0.0, 0.0, -0.25, -1.5]


def test_another_key_finds_no_record_of_the_sequence():
    with pytest.raises(UserError, match="names sequence 'seq-a', which this server has no record of"):
        recorded().sampled("mallory", 0, datum([6, 7, 8, 9], HONEST))


def test_tokens_the_sampler_did_not_draw_cannot_be_claimed_as_sampled():
    # the client's own token 4 at the last position, claimed as the sequence's second sampled token
    with pytest.raises(UserError, match=r"claims positions 2\.\.3 are sampled tokens\[0:2\] of 'seq-a'; they are not"):
        recorded().sampled("alice", 0, datum([6, 7, 8, 4], HONEST))
    # prompt tokens relabelled as sampled ones (so the loss would train on them)
    relabelled = [Span(True, "seq-a", 0, 2), Span(True, "seq-a", 0, 2)]
    with pytest.raises(UserError, match="are sampled tokens"):
        recorded().sampled("alice", 0, datum([6, 7, 8, 9], relabelled))
    # a run past the end of what was sampled
    past = [Span(False, "seq-a", 1, 2), Span(True, "seq-a", 1, 2)]
    with pytest.raises(UserError, match="they are not"):
        recorded().sampled("alice", 0, datum([6, 7, 9, 0], past))
    # the model input's spans are checked too
    forged_input = datum([6, 7, 8, 9], HONEST)
    forged_input.tokens = [5, 6, 7, 1]
    with pytest.raises(UserError, match=r"model_input_spans\[1\] claims positions 3\.\.3"):
        recorded().sampled("alice", 0, forged_input)


def test_spans_must_tile_the_targets_and_advantages_stay_on_sampled_tokens():
    with pytest.raises(UserError, match="loss_fn_input_spans cover 3 positions, not 4"):
        recorded().sampled("alice", 0, datum([6, 7, 8, 9], [Span(False, "seq-a", 1, 2), Span(True, "seq-a", 0, 1)]))
    with pytest.raises(UserError, match="an advantage at position 1, a prompt token"):
        recorded().sampled("alice", 0, datum([6, 7, 8, 9], HONEST, advantages=[0.0, 2.0, 1.0, 1.0]))
    with pytest.raises(UserError, match="data.0. has no provenance"):
        recorded().sampled("alice", 0, datum([6, 7, 8, 9], []))


def test_the_records_are_bounded_in_tokens_and_time(monkeypatch):
    records = StabilityRecords(max_tokens=12)  # each sequence counts its prompt (3) and its samples (2)
    for k in range(3):
        records.record("alice", [f"seq-{k}"], PROMPT, [SimpleNamespace(tokens=SAMPLED, logprobs=LOGPROBS)])
    with pytest.raises(UserError, match="'seq-0', which this server has no record of"):  # 15 > 12: the oldest went
        records.sampled("alice", 0, datum([6, 7, 8, 9], honest("seq-0"), sid="seq-0"))
    for kept_id in ("seq-1", "seq-2"):
        assert records.sampled("alice", 0, datum([6, 7, 8, 9], honest(kept_id), sid=kept_id))["sampled"].sum() == 2
    clock = [1000.0]
    monkeypatch.setattr(tinker_records.time, "monotonic", lambda: clock[0])
    kept = recorded()
    clock[0] += tinker_records.KEEP_S + 1  # a day after it was sampled and never trained on
    with pytest.raises(UserError, match="no record of"):
        kept.sampled("alice", 0, datum([6, 7, 8, 9], HONEST))
