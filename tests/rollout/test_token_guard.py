"""The engines refuse a prompt with a token id outside the model's embedding before it reaches the
model (`HFEngine.check_prompts`): `generate` of every engine, and a serving `BatchingEngine`'s
`submit`, where a bad id in the step would fail every request of the running batch. Ids 0 and
vocab-1 generate; vocab and -1 are refused in one line naming the prompt and position."""

import pytest

from tempering.batches import TokenIdOutOfRange
from tempering.config import SamplingParams
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.drafters import ModelDrafter
from tempering.rollout.engine import HFEngine
from tempering.rollout.speculative import SpeculativeEngine
from tests.conftest import tiny_llama
from tests.rollout.test_speculative import _IdsTokenizer

VOCAB = 64
PARAMS = SamplingParams(max_new_tokens=3, temperature=0.0)


def _engine(kind: str):
    tok = _IdsTokenizer(VOCAB, eos=None)
    if kind == "hf":
        return HFEngine(tiny_llama(VOCAB), tok, precision="fp32")
    if kind == "batching":
        return BatchingEngine(tiny_llama(VOCAB), tok, precision="fp32", max_slots=4, max_len=64)
    return SpeculativeEngine(
        tiny_llama(VOCAB), tok, ModelDrafter(tiny_llama(VOCAB, seed=1), "fp32"), k=2, precision="fp32"
    )


@pytest.mark.parametrize("kind", ["hf", "batching", "speculative"])
def test_every_engine_refuses_ids_past_either_edge_and_generates_at_the_edges(kind):
    engine = _engine(kind)
    out = engine.generate([[0, 5, VOCAB - 1]], PARAMS)
    assert len(out[0][0].token_ids) == 3
    with pytest.raises(TokenIdOutOfRange) as high:
        engine.generate([[1, 2], [3, VOCAB, 4]], PARAMS)
    assert str(high.value) == (
        f"prompt 1: token id {VOCAB} at position 1 is outside the model's vocabulary [0, {VOCAB}) "
        f"(its input embedding has {VOCAB} rows)"
    )
    with pytest.raises(TokenIdOutOfRange, match=r"^prompt 0: token id -1 at position 2 "):
        engine.generate([[1, 2, -1]], PARAMS)
    assert len(engine.generate([[VOCAB - 1, 0]], PARAMS)[0][0].token_ids) == 3  # still generates after a refusal


def test_a_serving_engine_refuses_at_submit_and_keeps_serving_the_batch():
    engine = BatchingEngine(
        tiny_llama(VOCAB), _IdsTokenizer(VOCAB, eos=None), precision="fp32", max_slots=4, max_len=64
    )
    engine.start()
    try:
        good = engine.submit([7, 8, 9], PARAMS)
        with pytest.raises(TokenIdOutOfRange, match=rf"^prompt 0: token id {VOCAB} at position 0 "):
            engine.submit([VOCAB, 1], PARAMS)
        with pytest.raises(TokenIdOutOfRange, match=r"^prompt 0: token id -5 at position 1 "):
            engine.submit([1, -5], PARAMS)
        assert len(good.result(timeout=60)[0].token_ids) == 3
        assert len(engine.submit([0, VOCAB - 1], PARAMS).result(timeout=60)[0].token_ids) == 3
    finally:
        engine.stop()
