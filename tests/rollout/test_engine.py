"""Rollout engine: same tokens as HF generate, log-probs the trainer recomputes, shared prefill."""

import pytest
import torch

from tempering.models.logprobs import grouped_logprobs, token_logprobs
from tempering.rollout.engine import Engine, HFEngine, SamplingParams, sample_tokens
from tests.conftest import tiny_llama

VOCAB = 49152


@pytest.fixture(scope="module")
def setup(smol_tokenizer):
    model = tiny_llama(vocab=VOCAB, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    prompts = [smol_tokenizer.encode(t) for t in ("hello there", "What is 2+2? Answer now.", "a")]
    return model, HFEngine(model, smol_tokenizer, precision="fp32"), prompts


def _pad(prompts, completions, pad=0):
    width = max(len(p) for p in prompts)
    p_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    p_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    c_width = max(len(c) for c in completions)
    c_ids = torch.tensor([c + [pad] * (c_width - len(c)) for c in completions])
    c_mask = torch.tensor([[1] * len(c) + [0] * (c_width - len(c)) for c in completions])
    return p_ids, p_mask, c_ids, c_mask


def sequence_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature=1.0):
    """Per-sample reference: `token_logprobs` over each [prompt | completion] row, completion columns."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    loss_mask = torch.cat([torch.zeros_like(prompt_mask), completion_mask], dim=1)
    logp, entropy = token_logprobs(model, ids, mask, loss_mask, temperature=temperature, with_entropy=True)
    return logp[:, prompt_ids.shape[1] :], entropy[:, prompt_ids.shape[1] :]


def test_hf_engine_is_an_engine(setup):
    _, engine, _ = setup
    assert isinstance(engine, Engine)


def test_greedy_matches_hf_generate(setup):
    model, engine, prompts = setup
    groups = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=12))
    for p, group in zip(prompts, groups):
        ref = model.generate(
            torch.tensor([p]), max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=engine.eos_id
        )[0, len(p) :].tolist()
        assert group[0].token_ids == ref


def test_logprobs_match_trainer_recompute(setup):
    model, engine, prompts = setup
    groups = engine.generate(prompts, SamplingParams(n=3, temperature=0.7, max_new_tokens=10, seed=5))
    flat = [(p, c) for p, g in zip(prompts, groups) for c in g]
    assert len(flat) == 9 and all(c.prompt_index == i // 3 for i, (_, c) in enumerate(flat))
    p_ids, p_mask, c_ids, c_mask = _pad([p for p, _ in flat], [c.token_ids for _, c in flat])
    with torch.no_grad():
        logp, entropy = sequence_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature=0.7)
    for i, (_, c) in enumerate(flat):
        assert torch.allclose(logp[i, : len(c.logprobs)], torch.tensor(c.logprobs), atol=1e-4)
        assert (entropy[i, : len(c.logprobs)] > 0).all()


def test_grouped_forward_equals_per_sample_forward_values_and_grads(setup):
    model, engine, prompts = setup
    groups = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=1))
    comps = [c.token_ids for g in groups for c in g]
    _, _, c_ids, c_mask = _pad([[1]] * len(comps), comps)
    p_ids, p_mask, _, _ = _pad(prompts, [[1]])
    flat_p = [p for p in prompts for _ in range(4)]
    fp_ids, fp_mask, _, _ = _pad(flat_p, [[1]])

    def run(fn, *args):
        model.zero_grad()
        logp, _ = fn(model, *args, c_ids, c_mask)
        (logp * torch.linspace(0.5, 2.0, logp.shape[1])).sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters()]

    a, ga = run(grouped_logprobs, p_ids, p_mask)
    b, gb = run(sequence_logprobs, fp_ids, fp_mask)
    assert torch.allclose(a, b, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb))


def test_seeded_sampling_repeats_and_stops(setup):
    _, engine, prompts = setup
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11)
    a, b = engine.generate(prompts, params), engine.generate(prompts, params)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    for g in a:
        for c in g:
            assert len(c.token_ids) == len(c.logprobs) <= 6
            stopped = c.token_ids[-1] == engine.eos_id
            assert c.finish_reason == ("stop" if stopped else "length") and c.truncated == (not stopped)


def test_stop_token_ends_a_sample(setup):
    _, engine, prompts = setup
    first = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=4))[0][0].token_ids
    stopped = engine.generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=4, stop_token_ids=(first[1],)))[
        0
    ][0]
    assert stopped.token_ids == first[:2] and stopped.finish_reason == "stop"


def test_greedy_picks_the_argmax_with_its_logprob():
    logits = torch.tensor([[0.0, 5.0, 1.0]])
    tok, lp = sample_tokens(logits, temperature=0, top_p=1.0, generator=None)
    assert tok.item() == 1 and lp.item() == pytest.approx(torch.log_softmax(logits, -1)[0, 1].item())


def test_inverse_cdf_picks_the_token_whose_cumulative_mass_crosses_the_draw():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]] * 4))
    u = torch.tensor([0.0, 0.49, 0.5, 0.95])  # cdf 0.5, 0.8, 1.0: u=0.5 is past the first token
    tok, lp = sample_tokens(logits, 1.0, 1.0, None, uniforms=u)
    assert tok.tolist() == [0, 0, 1, 2]
    assert torch.allclose(lp, torch.log(torch.tensor([0.5, 0.5, 0.3, 0.2])))
    tok, _ = sample_tokens(logits, 1.0, 0.75, None, uniforms=u)  # nucleus {0, 1}, mass 0.8
    assert tok.tolist() == [0, 0, 0, 1]  # u x 0.8 = 0, 0.392, 0.4, 0.76 against cdf 0.5, 0.8


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen = {sample_tokens(logits, 1.0, 0.75, gen)[0].item() for _ in range(300)}
    assert seen == {0, 1}  # 0.5 < 0.75 so token 1 joins; 0.8 >= 0.75 so nothing else does


def test_lora_last_layers_adapts_every_linear_of_the_top_blocks_only():
    from tempering.config import LoraSettings
    from tempering.models.lora import apply_lora

    model = apply_lora(tiny_llama(vocab=64, seed=0), LoraSettings(r=2, alpha=4, last_layers=1), "tiny")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    assert {n.split(".")[-4] for n in names} >= {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }


def test_generation_merges_lora_and_restores_the_base_weights_exactly(smol_tokenizer):
    from tempering.config import LoraSettings
    from tempering.models.lora import apply_lora

    model = tiny_llama(vocab=VOCAB, seed=4)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model = apply_lora(model, LoraSettings(r=2, alpha=4), "tiny")
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)  # a non-zero adapter, so merging changes outputs
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    engine = HFEngine(model, smol_tokenizer, precision="fp32")
    prompts = [smol_tokenizer.encode("merge me")]
    got = engine.generate(prompts, SamplingParams(n=2, temperature=0.8, max_new_tokens=6, seed=2))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    p_ids, p_mask, c_ids, c_mask = _pad(prompts * 2, [c.token_ids for c in got[0]])
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, p_ids, p_mask, c_ids, c_mask, temperature=0.8)
    for i, c in enumerate(got[0]):  # the unmerged adapter model agrees with what the merged one sampled
        assert torch.allclose(logp[i, : len(c.logprobs)], torch.tensor(c.logprobs), atol=1e-4)


def test_sync_weights_makes_the_engine_sample_the_new_weights(smol_tokenizer):
    target = tiny_llama(vocab=VOCAB, seed=9)
    engine = HFEngine(tiny_llama(vocab=VOCAB, seed=8), smol_tokenizer, precision="fp32")
    prompts = [smol_tokenizer.encode("sync me")]
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    before = engine.identity
    engine.sync_weights(target)
    reference = HFEngine(target, smol_tokenizer, precision="fp32")
    assert engine.identity == reference.identity != before
    assert engine.generate(prompts, greedy)[0][0].token_ids == reference.generate(prompts, greedy)[0][0].token_ids


def test_stop_string_ends_a_sample_and_is_cut_from_the_text(setup):
    _, engine, prompts = setup
    full = engine.generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=8))[0][0]
    # a stop string made of the 3rd and 4th generated tokens' text, hand-checked to occur once
    target = engine.tokenizer.decode(full.token_ids[2:4])
    assert target and full.text.count(target) >= 1
    stopped = engine.generate(prompts[:1], SamplingParams(temperature=0, max_new_tokens=8, stop=(target,)))[0][0]
    first = full.text.find(target)
    assert stopped.text == full.text[:first] and stopped.finish_reason == "stop"
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)] and len(stopped.token_ids) <= 4
    assert target in engine.tokenizer.decode(stopped.token_ids)


def test_stop_string_absent_changes_nothing(setup):
    _, engine, prompts = setup
    base = SamplingParams(temperature=0, max_new_tokens=6)
    a = engine.generate(prompts, base)
    b = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=6, stop=("\\u0000never",)))
    assert [[(c.token_ids, c.text, c.finish_reason) for c in g] for g in a] == [
        [(c.token_ids, c.text, c.finish_reason) for c in g] for g in b
    ]


def test_cut_at_stop_takes_the_earliest_stop_string():
    from tempering.rollout.engine import cut_at_stop

    assert cut_at_stop("12 + 3 = 15\nUser: next", ("User:", "\n")) == ("12 + 3 = 15", True)
    assert cut_at_stop("no stop here", ("###",)) == ("no stop here", False)


def test_empty_stop_string_is_refused():
    with pytest.raises(ValueError, match="non-empty"):
        SamplingParams(stop=("",))


def test_seeded_samples_depend_on_seed_prompt_and_sample_only_and_match_the_batching_engine(setup):
    """One sampling semantics for every engine: a seeded sample's tokens are fixed by (seed,
    prompt index, sample index), not by n, the batch or the engine (fp32)."""
    from tempering.rollout.batching_engine import BatchingEngine

    model, engine, prompts = setup
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=11)
    three = engine.generate(prompts, params)
    one = engine.generate(prompts[:1], params.model_copy(update={"n": 1}))
    assert one[0][0].token_ids == three[0][0].token_ids
    assert len({tuple(c.token_ids) for c in three[1]}) > 1  # the samples do differ
    batching = BatchingEngine(model, engine.tokenizer, precision="fp32").generate(prompts, params)
    assert [[c.token_ids for c in g] for g in batching] == [[c.token_ids for c in g] for g in three]
    other = engine.generate(prompts, params.model_copy(update={"seed": 12}))
    assert [[c.token_ids for c in g] for g in other] != [[c.token_ids for c in g] for g in three]


def test_sampled_logprob_is_under_the_tempered_untruncated_distribution():
    # logits log(4), log(2), log(1), 0 at temperature 0.5: weights 16, 4, 1, 1 -> probs 16/22, 4/22, 1/22, 1/22
    logits = torch.log(torch.tensor([[4.0, 2.0, 1.0, 1.0]] * 2))
    u = torch.tensor([0.5, 0.8])  # top_p 0.9 keeps {0, 1} (16/22 < 0.9 <= 20/22): u x 20 = 10, 16 against cdf 16, 20
    tok, lp = sample_tokens(logits, 0.5, 0.9, None, uniforms=u)
    assert tok.tolist() == [0, 1]
    assert torch.allclose(lp, torch.log(torch.tensor([16 / 22, 4 / 22])))  # not renormalised over the nucleus


@pytest.mark.parametrize("tie", [False, True])
def test_bf16_linear_weights_give_autocast_s_numbers_and_restore_the_fp32_parameters(tie):
    from tempering.models.precision import autocast
    from tempering.rollout.engine import bf16_linear_weights

    model = tiny_llama(tie=tie).eval()
    ids = torch.randint(3, 64, (2, 9))
    before = {n: (p, p.detach().clone()) for n, p in model.named_parameters()}
    with torch.no_grad(), autocast("bf16", torch.device("cpu")):
        plain = model(input_ids=ids).logits
        with bf16_linear_weights(model, "bf16"):
            assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
            assert model.model.embed_tokens.weight.dtype == torch.float32  # tied or not, the embedding keeps fp32
            cast = model(input_ids=ids).logits
    assert torch.equal(plain, cast)
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    for name, (param, value) in before.items():
        assert after[name] is param and torch.equal(param, value), name
    if tie:
        assert model.lm_head.weight is model.model.embed_tokens.weight


def test_bf16_linear_weights_leave_fp32_alone():
    from tempering.rollout.engine import bf16_linear_weights

    model = tiny_llama()
    with bf16_linear_weights(model, "fp32"):
        assert all(p.dtype == torch.float32 for p in model.parameters())
