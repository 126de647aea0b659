"""Long prompts in the batching engine: KV slots sized from the request (bounded by the model's
window), chunked prefill (same greedy tokens as one prefill, short requests decode meanwhile),
and the KV cache's bytes per token by hand."""

import random

import pytest
import torch

from tempering.config import SamplingParams
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import HFEngine
from tests.conftest import tiny_llama

VOCAB = 49152
WINDOW = 512  # tiny_llama's max_position_embeddings


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    model = tiny_llama(vocab=VOCAB, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    # sharper attention than at random init (near uniform there): a chunk prefilled at the wrong
    # positions, or not seen, changes the greedy tokens (checked: positions from 0 per chunk do)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    shorts = [smol_tokenizer.encode(t) for t in ("hello there", "What is 2+2? Answer now.", "count to ten")]
    return model, shorts


def _long(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


def test_chunked_prefill_gives_the_unchunked_greedy_tokens_fp32(tiny, smol_tokenizer):
    """Two long prompts (one ending on a chunk boundary) among short ones: chunks of 32 give the
    tokens of one prefill (HFEngine, and this engine with chunking off), whether the two chunk
    side by side or (a prefill budget of one chunk a step) one after the other.

    300 tokens: 9 chunks of 32 (288), the last 12 prefilled at admission; 320: 9 chunks, the
    last 32 at admission. Side by side both chunk at steps 1-9 and are admitted at step 10, whose
    token is the first of 12: the last comes at step 21. One after the other: the first as
    before, the second chunks at steps 10-18 (the first's lane frees at its admission), is
    admitted at step 19 and ends at step 30."""
    model, shorts = tiny
    prompts = [_long(300), *shorts, _long(320, seed=1)]
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    reference = HFEngine(model, smol_tokenizer, precision="fp32").generate(prompts, greedy)
    whole = BatchingEngine(model, smol_tokenizer, precision="fp32", prefill_chunk=10**6)
    chunked = BatchingEngine(model, smol_tokenizer, precision="fp32", prefill_chunk=32)
    one_lane = BatchingEngine(model, smol_tokenizer, precision="fp32", prefill_chunk=32, max_prefill_tokens=32)
    for engine in (whole, chunked, one_lane):
        got = engine.generate(prompts, greedy)
        assert [g[0].token_ids for g in got] == [r[0].token_ids for r in reference]
        for g, r in zip(got, reference):
            assert torch.allclose(torch.tensor(g[0].logprobs), torch.tensor(r[0].logprobs), atol=1e-5)
    assert whole.prefill_chunks == 0 and whole.steps == 12
    assert chunked.prefill_chunks == one_lane.prefill_chunks == 9 + 9
    assert chunked.steps == 21 and one_lane.steps == 30


def test_short_requests_decode_while_a_long_prompt_prefills(tiny, smol_tokenizer):
    """A 480-token prompt in chunks of 16 takes 29 chunk steps (464 tokens, 16 left for its
    admission at step 30); two short requests submitted with it finish their 5 tokens at steps
    1-5, long before the long prompt's first token, which equals its unchunked one."""
    model, shorts = tiny
    long_prompt = _long(480)
    greedy = SamplingParams(temperature=0, max_new_tokens=5)
    alone = HFEngine(model, smol_tokenizer, precision="fp32").generate([long_prompt], greedy)[0][0].token_ids
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", prefill_chunk=16)
    steps: dict[str, list[int]] = {"long": [], "a": [], "b": []}

    def at_step(name):
        return lambda sample, token, logprob: steps[name].append(engine.steps)

    engine.start()
    try:
        with engine._lock:  # all three queued before the serving thread's first step
            futures = [
                engine.submit(long_prompt, greedy, on_token=at_step("long")),
                engine.submit(shorts[0], greedy, on_token=at_step("a")),
                engine.submit(shorts[1], greedy, on_token=at_step("b")),
            ]
        results = [f.result(timeout=120) for f in futures]
    finally:
        engine.stop()
    assert steps["a"] == steps["b"] == [1, 2, 3, 4, 5]
    assert steps["long"] == [30, 31, 32, 33, 34]
    assert engine.prefill_chunks == 29
    assert results[0][0].token_ids == alone


def test_slots_are_sized_from_the_request_not_max_len(tiny, smol_tokenizer):
    """max_len=64 bounds served requests; a generate call's slots hold its 200-token prompt."""
    model, shorts = tiny
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    prompts = [_long(200), shorts[0]]
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_len=64)
    ref = HFEngine(model, smol_tokenizer, precision="fp32").generate(prompts, greedy)
    assert [g[0].token_ids for g in engine.generate(prompts, greedy)] == [r[0].token_ids for r in ref]


def test_answers_are_cut_at_the_window_and_a_prompt_filling_it_is_refused(tiny, smol_tokenizer):
    model, _ = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32")
    assert engine.context_window == WINDOW
    got = engine.generate([_long(505)], SamplingParams(temperature=0, max_new_tokens=20))[0][0]
    assert len(got.token_ids) == WINDOW - 505 and got.finish_reason == "length"
    with pytest.raises(ValueError, match=r"^prompt 1 has 512 tokens; the model's window is 512 tokens$"):
        engine.generate([_long(10), _long(512)], SamplingParams(temperature=0, max_new_tokens=1))


def test_kv_bytes_per_token_by_hand(smol_tokenizer):
    """tiny_llama: 2 layers, 2 kv heads of 32 / 4 = 8 dims. fp32: 2 x 2 x 2 x 8 x 4 bytes = 256;
    bf16 weights: 128; bf16 autocast over fp32 weights keeps keys fp32 (the rotary embedding
    computes in fp32) and values bf16: 2 x 2 x 8 x (4 + 2) = 192."""
    fp32 = tiny_llama(vocab=64)
    assert BatchingEngine(fp32, smol_tokenizer, precision="fp32").kv_bytes_per_token == 256
    assert BatchingEngine(fp32, smol_tokenizer, precision="bf16").kv_bytes_per_token == 192
    bf16 = tiny_llama(vocab=64).to(torch.bfloat16)
    assert BatchingEngine(bf16, smol_tokenizer, precision="bf16").kv_bytes_per_token == 128


def test_the_open_cache_holds_kv_bytes_per_token_per_position(tiny, smol_tokenizer):
    """While serving, the slot cache's bytes are rows x positions x kv_bytes_per_token."""
    model, shorts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4, max_len=256)
    seen = []
    engine.start()
    try:
        # one request: rows round up to ROW_STEP 8, capped at the 4 slots; positions to LENGTH_STEP 128
        engine.submit(
            shorts[0],
            SamplingParams(temperature=0, max_new_tokens=3),
            on_token=lambda *_: seen.append(engine.kv_cache_bytes),
        ).result(timeout=60)
    finally:
        engine.stop()
    assert seen[0] == 4 * 128 * engine.kv_bytes_per_token == 4 * 128 * 256


def test_prefill_chunk_is_a_batching_setting_and_reaches_the_engine(smol_tokenizer):
    from pydantic import ValidationError

    from tempering.config import EngineSettings
    from tempering.rollout.select import build_engine

    with pytest.raises(ValidationError, match="prefill_chunk applies to engine kind 'batching' only"):
        EngineSettings(kind="hf", prefill_chunk=64)
    engine = build_engine(EngineSettings(prefill_chunk=64), tiny_llama(vocab=64), smol_tokenizer, "fp32")
    assert isinstance(engine, BatchingEngine) and engine.prefill_chunk == 64
    assert BatchingEngine(tiny_llama(vocab=64), smol_tokenizer).prefill_chunk == EngineSettings().prefill_chunk == 512
