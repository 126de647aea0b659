"""Continuous batching: the scheduler's slot bookkeeping by hand, and the engine's output per
request equal to running that request alone (fp32: batching may change bf16 rounding)."""

import time

import pytest
import torch

from tempering.config import SamplingParams
from tempering.rollout.batching import Request, Scheduler, sample_rows, sample_seed
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import Engine, HFEngine, sample_tokens
from tests.conftest import tiny_llama

VOCAB = 49152


def _decode(ids):
    return " ".join(map(str, ids))


def _req(n=1, max_new=4, prompt=(5, 6, 7), **kw):
    return Request(list(prompt), SamplingParams(n=n, max_new_tokens=max_new, temperature=0, **kw))


# --- the scheduler, no model ---


def test_admission_fills_free_slots_first_come_first_served_with_whole_groups():
    s = Scheduler(slots=4, max_len=64, eos_id=2, decode=_decode)
    a, b, c = _req(n=2), _req(n=3), _req(n=1)
    for r in (a, b, c):
        s.submit(r)
    assert s.admit() == [a]  # b's 3 samples do not fit the 2 slots left; c waits behind b (FIFO)
    assert [(q.request, q.sample) for q in s.running] == [(a, 0), (a, 1)]
    s.record([9, 2], [-0.5, -0.1])  # sample 1 of a samples eos
    moves, done = s.finish()
    assert moves == [] and done == [] and len(s.running) == 1  # the last slot left: nothing moves
    assert s.admit() == [b] and len(s.running) == 4  # 1 + 3 = 4 slots: b joins, c (one more) waits
    assert list(s.waiting) == [c]


def test_a_leaving_sequence_takes_the_last_one_into_its_slot():
    s = Scheduler(slots=4, max_len=64, eos_id=2, decode=_decode)
    reqs = [_req(prompt=range(3, 3 + k)) for k in (2, 3, 4, 5)]  # prompts of 2, 3, 4, 5 tokens
    for r in reqs:
        s.submit(r)
    s.admit()
    s.record([10, 2, 11, 2], [0.0] * 4)  # rows 1 and 3 stop
    moves, done = s.finish()
    # row 3 is last (popped, no move); row 1 gets row 2, whose cache holds 4 prompt + 0 tokens
    assert moves == [(2, 1, 4)]
    assert [q.request for q in s.running] == [reqs[0], reqs[2]]
    assert done == [reqs[3], reqs[1]] and reqs[1].completions[0].token_ids == [2]
    assert reqs[1].completions[0].finish_reason == "stop"


def test_max_new_tokens_and_stop_tokens_finish_per_request():
    s = Scheduler(slots=4, max_len=64, eos_id=2, decode=_decode)
    short, stopper = _req(max_new=1), _req(max_new=5, stop_token_ids=(42,))
    s.submit(short)
    s.submit(stopper)
    s.admit()
    s.record([7, 8], [-1.0, -2.0])
    s.finish()
    assert short.completions[0].finish_reason == "length" and short.completions[0].token_ids == [7]
    s.record([42], [-3.0])
    s.finish()
    got = stopper.completions[0]
    assert (got.token_ids, got.logprobs, got.finish_reason, got.text) == ([8, 42], [-2.0, -3.0], "stop", "8")


def test_a_cancelled_request_ends_at_its_next_token_and_frees_its_slots():
    s = Scheduler(slots=4, max_len=64, eos_id=2, decode=_decode)
    gone = []
    left, stays = _req(n=2, max_new=50), _req(max_new=50)
    left.cancelled = lambda: bool(gone)
    for r in (left, stays):
        s.submit(r)
    s.admit()
    s.record([7, 8, 9], [-1.0] * 3)
    assert s.finish() == ([], []) and len(s.running) == 3  # nobody has left yet: all decode on
    gone.append(True)  # the client leaves
    s.record([10, 11, 12], [-1.0] * 3)
    moves, done = s.finish()
    assert done == [left] and [q.request for q in s.running] == [stays] and moves == [(2, 1, 4), (1, 0, 4)]
    assert [(c.token_ids, c.finish_reason) for c in left.completions] == [
        ([7, 10], "cancelled"),
        ([8, 11], "cancelled"),
    ]


def test_stop_string_cuts_the_text():
    s = Scheduler(slots=2, max_len=64, eos_id=2, decode=_decode)
    r = Request([5], SamplingParams(max_new_tokens=9, temperature=0, stop=("4 5",)))
    s.submit(r)
    s.admit()
    for tok in (3, 4, 5):
        s.record([tok], [0.0])
        s.finish()
    assert (r.completions[0].text, r.completions[0].finish_reason) == ("3 ", "stop")
    assert r.completions[0].token_ids == [3, 4, 5]


def test_requests_that_cannot_fit_are_refused_with_the_numbers():
    s = Scheduler(slots=4, max_len=10, eos_id=2, decode=_decode)
    with pytest.raises(ValueError, match=r"prompt \(3 tokens\) \+ max_new_tokens \(8\) exceeds .* max_len 10"):
        s.submit(_req(max_new=8))
    with pytest.raises(ValueError, match="n=5 samples needs more slots"):
        s.submit(_req(n=5))


def test_seeded_rows_sample_as_they_would_alone_whatever_shares_the_batch():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))

    def sampled(reqs, rows):
        s = Scheduler(slots=4, max_len=64, eos_id=None, decode=_decode)
        for r in reqs:
            s.submit(r)
        s.admit()
        return sample_rows(logits[rows], s.running)

    seeded = lambda: Request([1], SamplingParams(n=2, temperature=0.9, seed=4))
    other = Request([1], SamplingParams(temperature=0.5, top_p=0.8, seed=9))
    greedy = Request([1], SamplingParams(temperature=0))
    alone = sampled([seeded()], [0, 1])
    mixed = sampled([seeded(), other, greedy], [0, 1, 2, 3])
    assert mixed[0][:2] == alone[0] and mixed[1][:2] == pytest.approx(alone[1])
    assert mixed[0][3] == int(logits[3].argmax())
    # the draw is sample_tokens' inverse CDF with the row's own uniform
    u = torch.rand(1, generator=torch.Generator().manual_seed(sample_seed(4, 0)))
    tok, lp = sample_tokens(logits[:1], 0.9, 1.0, None, uniforms=u)
    assert alone[0][0] == int(tok) and alone[1][0] == pytest.approx(float(lp))


# --- the engine on a tiny random model (fp32) ---


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    model = tiny_llama(vocab=VOCAB, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    texts = ("hello there", "What is 2+2? Answer now.", "a", "the quick brown fox jumps over", "x y", "count to ten")
    return model, [smol_tokenizer.encode(t) for t in texts]


def test_batching_engine_is_an_engine_and_matches_hf_engine_greedy(tiny, smol_tokenizer):
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4)
    assert isinstance(engine, Engine)
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    ref = HFEngine(model, smol_tokenizer, precision="fp32").generate(prompts, greedy)
    got = engine.generate(prompts, greedy)  # 6 prompts, 4 slots: two join when the first leave
    for r, g in zip(ref, got):
        assert g[0].token_ids == r[0].token_ids and g[0].text == r[0].text
        assert g[0].prompt_index == r[0].prompt_index
        assert torch.allclose(torch.tensor(g[0].logprobs), torch.tensor(r[0].logprobs), atol=1e-4)


def test_mixed_requests_joining_and_leaving_equal_each_request_alone(tiny, smol_tokenizer):
    """Per-request max tokens, stops and seeds through the serving API, 3 slots for 6 requests:
    requests join mid-flight; each result equals that request run alone."""
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=3, max_len=64)
    params = [SamplingParams(temperature=0, max_new_tokens=3 + 2 * i) for i in range(4)]
    params += [
        SamplingParams(n=2, temperature=0.8, max_new_tokens=7, seed=5),
        SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=5, seed=6),
    ]
    alone = [engine.generate([p], q)[0] for p, q in zip(prompts, params)]
    streamed = []
    engine.start()
    try:
        futures = [
            engine.submit(p, q, on_token=(lambda j, t, lp: streamed.append(t)) if i == 0 else None)
            for i, (p, q) in enumerate(zip(prompts, params))
        ]
        batched = [f.result(timeout=120) for f in futures]
    finally:
        engine.stop()
    for a, b in zip(alone, batched):
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    assert streamed == batched[0][0].token_ids
    assert [len(c.token_ids) for c in batched[0] + batched[1]] == [3, 5]
    assert batched[4][0].token_ids != batched[4][1].token_ids  # two samples, two generators


def test_seeded_generate_repeats_and_n_samples_share_the_prompt(tiny, smol_tokenizer):
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8)
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=11)
    a, b = engine.generate(prompts[:2], params), engine.generate(prompts[:2], params)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert [len(g) for g in a] == [4, 4] and all(c.prompt_index == i for i, g in enumerate(a) for c in g)
    assert len({tuple(c.token_ids) for c in a[0]}) > 1


def test_shared_prefix_by_hand():
    from tempering.rollout.batching_engine import shared_prefix

    assert shared_prefix([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_prefix([[1, 2, 3], [1, 2, 3, 4]]) == 2  # each prompt keeps one token of its own
    assert shared_prefix([[7, 8], [6, 8]]) == 0


def test_prompts_sharing_a_prefix_prefill_it_once_and_decode_as_alone(tiny, smol_tokenizer):
    """A common opening of 16+ tokens (a system prompt) is prefilled once for the prompts admitted
    together; logits and greedy tokens equal each prompt run alone (HFEngine, fp32)."""
    model, _ = tiny
    system = smol_tokenizer.encode(
        "You are a careful assistant. Answer every question briefly, exactly and politely, please."
    )
    assert len(system) >= 16
    prompts = [system + smol_tokenizer.encode(q) for q in ("What is 2+2?", "Name a colour", "hi")]
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4)
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    got = engine.generate(prompts, greedy)
    assert engine.shared_prefix_tokens == len(system) * 2  # prefilled once instead of three times
    reference = HFEngine(model, smol_tokenizer, precision="fp32")
    for p, g in zip(prompts, got):
        r = reference.generate([p], greedy)[0][0]
        assert g[0].token_ids == r.token_ids
        assert torch.allclose(torch.tensor(g[0].logprobs), torch.tensor(r.logprobs), atol=1e-4)


@pytest.mark.slow
def test_default_model_batched_greedy_equals_each_prompt_alone_fp32(smol_tokenizer):
    from tempering.models.load import load_model

    model = load_model("smollm2-135m-instruct")
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=2)  # the third joins later
    questions = ["What is 12 + 7?", "Name a colour.", "What is the capital of France?"]
    prompts = [engine.chat_prompt([{"role": "user", "content": q}]) for q in questions]
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    batched = engine.generate(prompts, greedy)
    assert engine.shared_prefix_tokens > 0  # the chat template's system prompt was prefilled once
    for p, b in zip(prompts, batched):
        assert b[0].token_ids == engine.generate([p], greedy)[0][0].token_ids


def test_bf16_autocast_over_fp32_weights_runs_and_agrees_alone(tiny, smol_tokenizer):
    """Under bf16 autocast the rotary embedding leaves keys fp32 and values bf16: the slot
    cache keeps each in its own dtype. One request alone decodes as HFEngine does."""
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="bf16", max_slots=2)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    reference = HFEngine(model, smol_tokenizer, precision="bf16")
    for p in prompts[:3]:
        assert engine.generate([p], greedy)[0][0].token_ids == reference.generate([p], greedy)[0][0].token_ids
    assert [len(g[0].token_ids) for g in engine.generate(prompts, greedy)] == [6] * len(prompts)


def test_a_failing_step_fails_its_requests_and_the_server_goes_on(tiny, smol_tokenizer):
    """A request whose streaming hook raises breaks the step it is in: the requests of that step
    get the error (their futures raise), and the serving thread answers the next request."""
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4, max_len=64)
    greedy = SamplingParams(temperature=0, max_new_tokens=5)
    alone = engine.generate([prompts[1]], greedy)[0][0].token_ids

    def broken(sample, token, logprob):
        raise RuntimeError("client hook failed")

    engine.start()
    try:
        bad = engine.submit(prompts[0], greedy, on_token=broken)
        with pytest.raises(RuntimeError, match="client hook failed"):
            bad.result(timeout=60)
        assert engine.submit(prompts[1], greedy).result(timeout=60)[0].token_ids == alone
    finally:
        engine.stop()


# --- one sequence alone: the single-stream step (models/llama_decode.py) ---


def test_one_sequence_alone_decodes_single_stream_as_the_hf_forward_fp32(tiny, smol_tokenizer):
    """A call of one prompt decodes through `LlamaDecoder`; greedy tokens equal HFEngine's in
    fp32, over 140 new tokens (the slot cache's 128-position step is crossed)."""
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4)
    reference = HFEngine(model, smol_tokenizer, precision="fp32")
    for p, new in zip(prompts[:4], (140, 12, 130, 5)):
        greedy = SamplingParams(temperature=0, max_new_tokens=new)
        before = engine.single_stream_tokens
        got = engine.generate([p], greedy)[0][0]
        ref = reference.generate([p], greedy)[0][0]
        assert got.token_ids == ref.token_ids and len(got.token_ids) == new
        assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(ref.logprobs), atol=1e-4)
        assert engine.single_stream_tokens - before == new - 1  # the first token comes from prefill
    assert engine.single_stream_off is None


def test_a_batch_never_takes_the_single_stream_step(tiny, smol_tokenizer):
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4)
    engine.generate(prompts[:3], SamplingParams(temperature=0, max_new_tokens=6))
    engine.generate(prompts[:1], SamplingParams(n=2, temperature=0, max_new_tokens=6))
    assert engine.single_stream_tokens == 0


def test_served_requests_switch_between_single_stream_and_batched_steps(tiny, smol_tokenizer):
    """Serving: a lone request decodes single-stream, one joining makes the step batched, and the
    K/V both paths wrote are the same slot cache: every result equals its request alone."""
    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4, max_len=256)
    greedy = [SamplingParams(temperature=0, max_new_tokens=n) for n in (40, 10, 20)]
    reference = HFEngine(model, smol_tokenizer, precision="fp32")
    alone = [reference.generate([p], g)[0][0].token_ids for p, g in zip(prompts, greedy)]
    first_tokens = []
    engine.start()
    try:
        first = engine.submit(prompts[0], greedy[0], on_token=lambda j, t, lp: first_tokens.append(t))
        while len(first_tokens) < 8:  # the first request runs alone for a while
            assert not first.done()
            time.sleep(0.01)
        others = [engine.submit(p, g) for p, g in zip(prompts[1:3], greedy[1:3])]
        got = [f.result(timeout=120)[0].token_ids for f in (first, *others)]
    finally:
        engine.stop()
    assert got == alone
    assert engine.single_stream_tokens >= 7 and engine.peak_running >= 2


def test_submit_does_not_wait_for_a_step_and_the_request_joins_the_next_one(tiny, smol_tokenizer):
    """A submitter never waits on the step lock: while a step holds it (here the test holds it),
    `submit` returns at once and the request is admitted by the next step. Before, `submit` took
    the step lock, and a serving thread re-taking it step after step kept submitters out."""
    import threading

    model, prompts = tiny
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=4, max_len=256)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    alone = HFEngine(model, smol_tokenizer, precision="fp32").generate([prompts[0]], greedy)[0][0].token_ids
    futures, returned = [], threading.Event()
    engine.start()
    try:
        with engine._lock:  # what a running step holds
            submitter = threading.Thread(
                target=lambda: (futures.append(engine.submit(prompts[0], greedy)), returned.set())
            )
            submitter.start()
            assert returned.wait(timeout=30), "submit waited for the step lock"
            assert not futures[0].done()
        assert futures[0].result(timeout=120)[0].token_ids == alone
    finally:
        engine.stop()


def test_a_model_the_step_does_not_serve_keeps_the_hf_forward(smol_tokenizer):
    from tests.conftest import tiny_moe

    model = tiny_moe(vocab=VOCAB, seed=2).eval()
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    prompt = smol_tokenizer.encode("hello there")
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=2)
    got = engine.generate([prompt], greedy)[0][0].token_ids
    assert engine.single_stream_off == "model type 'qwen3_moe' is not 'llama'"
    assert engine.single_stream_tokens == 0
    assert got == HFEngine(model, smol_tokenizer, precision="fp32").generate([prompt], greedy)[0][0].token_ids


def test_int8_single_stream_equals_the_int8_hf_forward(tiny, smol_tokenizer):
    """The int8 step runs the same int8 rows and scales as `Int8WeightLinear` (bf16 activations)."""
    from tempering.models.quantize import quantize_int8

    model, prompts = tiny
    q = quantize_int8(model)
    engine = BatchingEngine(q, smol_tokenizer, precision="fp32", max_slots=2)
    reference = HFEngine(q, smol_tokenizer, precision="fp32")
    greedy = SamplingParams(temperature=0, max_new_tokens=24)
    for p in prompts[:4]:
        assert engine.generate([p], greedy)[0][0].token_ids == reference.generate([p], greedy)[0][0].token_ids
    assert engine.single_stream_tokens == 4 * 23


@pytest.mark.slow
def test_default_model_single_stream_greedy_equals_hf_generate_fp32(smol_tokenizer):
    """The default model (30 layers, 9 heads / 3 K/V heads, tied head) alone through the
    single-stream step: HF `generate`'s greedy tokens, one prompt crossing 128 positions."""
    from tempering.models.load import load_model

    model = load_model("smollm2-135m-instruct").eval()
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=2)
    questions = ["What is 12 + 7?", "Name a colour. " * 24]  # the second prompt is ~125 tokens
    for q in questions:
        prompt = engine.chat_prompt([{"role": "user", "content": q}])
        got = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12))[0][0].token_ids
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12)[0, len(prompt) :]
        assert got == ref.tolist()[: len(got)] and len(got) >= 1
    assert engine.single_stream_tokens > 0 and engine.single_stream_off is None
