"""Gemma 3's sliding-window layers through the engines: the slot cache's per-layer-type masks by hand,
and the batching engine equal to the HF engine on sequences that run past the window (fp32)."""

import torch

from tempering.config import SamplingParams
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import HFEngine
from tempering.rollout.kvcache import SlotKVCache, sliding_window
from tests.conftest import tiny_gemma, tiny_llama

VOCAB = 49152


def test_the_decode_mask_of_a_sliding_window_model_is_one_per_layer_type():
    cache = SlotKVCache(slots=2, max_len=16)
    cache.reserve(2, 16)
    cache.bind(torch.tensor([5, 2]), longest=5)  # row 0 writes position 5, row 1 position 2
    config = tiny_gemma(vocab=8, window=3).config
    masks = cache.decode_mask(config)
    assert isinstance(masks, dict)
    full, sliding = masks["full_attention"][:, 0, 0], masks["sliding_attention"][:, 0, 0]
    assert full.int().tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
    # the last 3 positions up to each row's own: 3..5 and 0..2
    assert sliding.int().tolist() == [[0, 0, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
    assert sliding_window(tiny_llama(vocab=8).config) is None
    assert torch.equal(cache.decode_mask(tiny_llama(vocab=8).config), masks["full_attention"])


def test_batching_engine_equals_hf_engine_on_gemma_past_its_sliding_window(smol_tokenizer):
    """Prompts and answers several times the 4-position window: a sliding layer that saw the whole
    cache would change the logits (and soon the tokens). A lone sequence keeps the HF forward."""
    model = tiny_gemma(vocab=VOCAB, seed=3, window=4).eval()
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    texts = ("hello there, how are you today", "What is 2+2? Answer now.", "a", "count to ten slowly")
    prompts = [smol_tokenizer.encode(t) for t in texts]
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    ref = HFEngine(model, smol_tokenizer, precision="fp32").generate(prompts, greedy)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=3)
    got = engine.generate(prompts, greedy)  # 4 prompts, 3 slots: one joins when another leaves
    for r, g in zip(ref, got):
        assert g[0].token_ids == r[0].token_ids
        assert torch.allclose(torch.tensor(g[0].logprobs), torch.tensor(r[0].logprobs), atol=1e-4)
    alone = engine.generate(prompts[:1], greedy)[0][0]
    assert alone.token_ids == ref[0][0].token_ids
    assert engine.single_stream_off == "model type 'gemma3_text' is not 'llama'"
    assert engine.single_stream_tokens == 0


def test_seeded_gemma_samples_repeat_and_agree_between_the_engines(smol_tokenizer):
    """A sample's draws depend on (seed, prompt, sample) only, in either engine (fp32)."""
    model = tiny_gemma(vocab=VOCAB, seed=4, window=4).eval()
    prompts = [smol_tokenizer.encode("the quick brown fox jumps over"), smol_tokenizer.encode("x y")]
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=9)
    hf, batching = HFEngine(model, smol_tokenizer, "fp32"), BatchingEngine(model, smol_tokenizer, "fp32")
    a, b = hf.generate(prompts, params), batching.generate(prompts, params)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert [[c.token_ids for c in g] for g in batching.generate(prompts, params)] == [
        [c.token_ids for c in g] for g in b
    ]
    assert len({tuple(c.token_ids) for c in a[0]}) > 1
