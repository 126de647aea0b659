"""The slot KV cache holds what its running sequences can reach, not its limits: it grows on
`reserve` (keeping what it holds), is freed when the batch empties, and the scheduler's
`cache_tokens` budget bounds it (requests wait, one too big alone is refused)."""

import threading
import time

import pytest
import torch

from tempering.config import SamplingParams
from tempering.rollout.batching import Request, Scheduler
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.kvcache import LENGTH_STEP, ROW_STEP, SlotKVCache
from tests.conftest import tiny_llama


def _layer_kv(batch: int, length: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    k = torch.full((batch, 2, length, 4), fill)
    return [(k, k + 1), (k + 2, k + 3)]  # two layers


def test_reserve_allocates_what_is_asked_rounded_up_not_the_limits():
    cache = SlotKVCache(slots=32, max_len=2048)
    cache.reserve(rows=3, length=100)
    cache.write_prefill(_layer_kv(1, 10, 1.0), [[0, 1, 2]], [10])
    assert cache.keys[0].shape == (ROW_STEP, 2, LENGTH_STEP, 4)
    assert cache.nbytes == 2 * 2 * ROW_STEP * 2 * LENGTH_STEP * 4 * 4  # layers x (K, V) x ... x fp32


def test_growth_keeps_the_cached_keys_and_values():
    cache = SlotKVCache(slots=32, max_len=2048)
    cache.reserve(rows=2, length=10)
    cache.write_prefill(_layer_kv(2, 10, 5.0), [[0], [1]], [10, 7])
    before = [t.clone() for t in cache.keys + cache.values]
    cache.reserve(rows=20, length=300)
    assert cache.keys[1].shape == (24, 2, 384, 4)
    for old, new in zip(before, cache.keys + cache.values):
        assert torch.equal(new[: old.shape[0], :, : old.shape[2]], old)
        assert not new[old.shape[0] :].any() and not new[:, :, old.shape[2] :].any()


def test_reserve_never_passes_the_limits_and_release_frees_everything():
    cache = SlotKVCache(slots=4, max_len=200)
    cache.reserve(rows=3, length=150)
    assert (cache.rows, cache.length) == (4, 200)  # rounding stops at the limits
    with pytest.raises(ValueError, match="do not fit"):
        cache.reserve(rows=5, length=10)
    with pytest.raises(ValueError, match="do not fit"):
        cache.reserve(rows=1, length=201)
    cache.write_prefill(_layer_kv(1, 5, 1.0), [[0]], [5])
    cache.release()
    assert cache.nbytes == 0 and (cache.rows, cache.length) == (0, 0)


def test_writing_past_the_reservation_is_refused():
    cache = SlotKVCache(slots=32, max_len=2048)
    cache.reserve(rows=1, length=8)
    with pytest.raises(ValueError, match="reserve first"):
        cache.write_prefill(_layer_kv(1, 10, 1.0), [[8]], [10])


def _req(prompt_len: int, max_new: int, n: int = 1) -> Request:
    return Request(list(range(3, 3 + prompt_len)), SamplingParams(n=n, max_new_tokens=max_new, temperature=0))


def test_the_budget_holds_requests_back_until_running_ones_leave():
    s = Scheduler(slots=8, max_len=512, eos_id=2, decode=str, cache_tokens=300)
    a, b, c = _req(50, 50), _req(50, 50), _req(90, 60)  # reach 100, 100, 150
    for r in (a, b, c):
        s.submit(r)
    assert s.admit() == [a, b]  # c would make 3 rows x 150 = 450 > 300
    assert s.reservation() == (2, 100)
    s.running[0].finish_reason = "length"
    s.finish()
    assert s.admit() == [c] and s.reservation() == (2, 150)  # 2 x 150 = 300 fits


def test_a_request_bigger_than_the_budget_alone_is_refused_at_submit():
    s = Scheduler(slots=8, max_len=512, eos_id=2, decode=str, cache_tokens=300)
    with pytest.raises(ValueError, match="KV cache budget of 300 tokens"):
        s.submit(_req(100, 60, n=2))  # 2 samples x 160 positions
    s.submit(_req(100, 60))
    assert len(s.admit()) == 1


def test_a_serving_engine_holds_the_cache_its_requests_reach_and_frees_it_when_idle(smol_tokenizer):
    """32 slots of 2048 positions allowed, two short requests running: the cache holds one row
    step x one length step while they decode, nothing once they are done."""
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=32, max_len=2048)
    seen: list[int] = []
    lock = threading.Lock()

    def watch(sample: int, token: int, logprob: float) -> None:
        with lock:
            seen.append(engine.kv_cache_bytes)

    engine.start()
    try:
        params = SamplingParams(temperature=0, max_new_tokens=12, stop_token_ids=[])
        futures = [engine.submit(list(range(5, 5 + n)), params, on_token=watch) for n in (9, 20)]
        assert all(0 < len(f.result(timeout=120)[0].token_ids) <= 12 for f in futures)
        engine.submit([5, 6, 7], params).result(timeout=120)  # the engine goes idle after this
    finally:
        engine.stop()
    layers, kv_heads, head_dim = 2, 2, 8  # tiny_llama: 2 layers, 2 KV heads of 32 / 4
    one_step = layers * 2 * ROW_STEP * kv_heads * LENGTH_STEP * head_dim * 4
    full = layers * 2 * 32 * kv_heads * 2048 * head_dim * 4
    assert seen and max(seen) == one_step and one_step * 64 == full


def test_a_serving_engine_gives_the_cache_back_between_bursts(smol_tokenizer):
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4, max_len=256)
    engine.start()
    try:
        params = SamplingParams(temperature=0, max_new_tokens=6, stop_token_ids=[])
        engine.submit([5, 6, 7, 8], params).result(timeout=120)
        for _ in range(200):  # the serving thread releases right after the step that finished it
            if engine.kv_cache_bytes == 0:
                break
            time.sleep(0.05)
        assert engine.kv_cache_bytes == 0 and engine.serving
        assert engine.submit([5, 6], params).result(timeout=120)[0].token_ids  # and reserves again
    finally:
        engine.stop()


def test_the_budget_is_a_batching_setting_and_reaches_the_engine(smol_tokenizer):
    from pydantic import ValidationError

    from tempering.config import EngineSettings
    from tempering.rollout.select import build_engine

    with pytest.raises(ValidationError, match="max_cache_tokens applies to engine kind 'batching' only"):
        EngineSettings(kind="hf", max_cache_tokens=1000)
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    engine = build_engine(EngineSettings(max_cache_tokens=1000), model, smol_tokenizer, "fp32")
    with pytest.raises(ValueError, match="KV cache budget of 1000 tokens"):
        engine.generate([[5] * 400], SamplingParams(n=3, max_new_tokens=100))  # 3 x 500, within the window of 512
