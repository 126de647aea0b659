"""Speculative decoding: the verification rule by hand, then lossless end to end on tiny models
(greedy identical to the target alone; sampled output has the target's distribution)."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from tempering.config import SamplingParams
from tempering.hashing import model_state_hash
from tempering.rollout.drafters import ModelDrafter, PromptLookupDrafter
from tempering.rollout.engine import Engine, HFEngine
from tempering.rollout.speculative import SpeculativeEngine
from tempering.rollout.speculative_math import sampling_probs, verify_greedy, verify_sampled
from tests.conftest import tiny_llama


class _IdsTokenizer:
    """The few tokenizer fields the engines read, for a small vocabulary of bare ids."""

    pad_token_id = 0

    def __init__(self, vocab: int, eos: int | None):
        self.vocab, self.eos_token_id = vocab, eos

    def __len__(self) -> int:
        return self.vocab

    def decode(self, ids, **kwargs) -> str:
        return " ".join(map(str, ids))


def _peaked(vocab: int, seed: int, layers: int = 2):
    """A tiny random Llama with a sharpened head, so its next-token distributions differ
    clearly from another seed's (a near-uniform pair could not tell target from draft)."""
    model = tiny_llama(vocab=vocab, seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(20)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    return model.eval()


# --- the rule, by hand ---


def test_verify_greedy_accepts_the_matching_prefix_then_corrects():
    # target argmax per position: [5, 6, 7, 8]; drafts [5, 6, 1]: two accepted, then 7
    logits = torch.full((2, 4, 10), -1.0)
    for j, t in enumerate([5, 6, 7, 8]):
        logits[:, j, t] = 1.0
    draft = torch.tensor([[5, 6, 1], [5, 6, 7]])
    n, nxt = verify_greedy(logits, draft, torch.tensor([3, 3]))
    assert n.tolist() == [2, 3] and nxt.tolist() == [7, 8]  # row 2: all accepted, bonus token 8
    n, nxt = verify_greedy(logits, draft, torch.tensor([1, 0]))  # shorter proposals stop acceptance
    assert n.tolist() == [1, 0] and nxt.tolist() == [6, 5]


def test_verify_sampled_emits_the_target_distribution_from_any_draft():
    # k = 1, p = [.5, .3, .2], q = [.2, .6, .2]: accept with prob min(1, p/q); by hand the
    # acceptance rate is sum(min(p, q)) = .2 + .3 + .2 = .7, and the first token is ~ p
    rows = 200_000
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2]).expand(rows, 2, 3)
    q = torch.tensor([0.2, 0.6, 0.2]).expand(rows, 1, 3)
    draft = torch.multinomial(q[:, 0], 1, generator=gen)
    n, nxt = verify_sampled(p, q, draft, torch.ones(rows, dtype=torch.long), gen)
    first = torch.where(n == 1, draft[:, 0], nxt)
    freq = torch.bincount(first, minlength=3) / rows
    sigma = (0.25 / rows) ** 0.5
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2]), atol=5 * sigma)
    assert abs(n.float().mean().item() - 0.7) < 5 * sigma


def test_verify_sampled_deterministic_draft_and_empty_positions():
    # one-hot draft on token 0 under p = [.5, .3, .2]: accepted with prob .5; on rejection the
    # residual is [0, .6, .4]; a position past the row's length is rejected and draws from p
    rows = 200_000
    gen = torch.Generator().manual_seed(1)
    p = torch.tensor([0.5, 0.3, 0.2]).expand(rows, 2, 3)
    draft = torch.zeros((rows, 1), dtype=torch.long)
    n, nxt = verify_sampled(p, None, draft, torch.ones(rows, dtype=torch.long), gen)
    sigma = (0.25 / rows) ** 0.5
    assert abs(n.float().mean().item() - 0.5) < 5 * sigma
    rejected = torch.bincount(nxt[n == 0], minlength=3) / (n == 0).sum()
    assert torch.allclose(rejected, torch.tensor([0.0, 0.6, 0.4]), atol=5 * (0.25 / (rows / 2)) ** 0.5)
    n, nxt = verify_sampled(p, None, draft, torch.zeros(rows, dtype=torch.long), gen)
    assert n.max().item() == 0
    assert torch.allclose(torch.bincount(nxt, minlength=3) / rows, p[0, 0], atol=5 * sigma)


def test_sampling_probs_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(sampling_probs(logits, 1.0, 0.8), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert torch.allclose(sampling_probs(logits, 1.0, 1.0), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))


def test_prompt_lookup_copies_after_the_latest_match_of_the_longest_ngram():
    drafter = PromptLookupDrafter(max_ngram=2)
    #          0  1  2  3  4  5  6  7  8  9
    context = [7, 8, 9, 4, 7, 8, 5, 6, 1, 7, 8]  # "7 8" occurs at 0 and 4: latest is 4 -> 5 6 1
    assert drafter.lookup(context, 3) == [5, 6, 1]
    assert drafter.lookup([1, 2, 3, 2], 2) == [3, 2]  # 1-gram "2" at index 1
    assert drafter.lookup([1, 2, 3], 4) == []
    tokens, q, lengths = drafter.propose([context, [1, 2, 3]], 3, 0.0, 1.0, None)
    assert tokens.tolist() == [[5, 6, 1], [0, 0, 0]] and q is None and lengths.tolist() == [3, 0]


# --- lossless end to end ---


@pytest.fixture(scope="module")
def greedy_setup():
    target = _peaked(64, seed=0)
    draft = _peaked(64, seed=0, layers=1)  # the target's first layer: a partly right draft
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(3, 64, (int(torch.randint(2, 12, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(200)
    ]
    params = SamplingParams(temperature=0, max_new_tokens=20)
    tok = _IdsTokenizer(64, eos=2)
    reference = [g[0].token_ids for g in HFEngine(target, tok, precision="fp32").generate(prompts, params)]
    return target, draft, tok, prompts, params, reference


def _drafter(kind: str, draft, vocab: int):
    """A model draft, the same restricted to part of the vocabulary (FR-Spec), the same stopping
    at its first token below probability 0.3, or prompt lookup."""
    if kind == "lookup":
        return PromptLookupDrafter(max_ngram=2)
    return ModelDrafter(
        draft,
        "fp32",
        vocab=torch.arange(vocab // 2) if kind == "subset" else None,
        min_confidence=0.3 if kind == "confident" else 0.0,
    )


def test_min_confidence_ends_each_rows_proposal_after_its_first_unsure_token(greedy_setup):
    _, draft, _, prompts, _, _ = greedy_setup
    contexts = prompts[:3]
    always = ModelDrafter(draft, "fp32")
    always.begin(contexts)
    tokens, _, lengths = always.propose(contexts, 4, 0.0, 1.0, None)
    assert tokens.shape == (3, 4) and lengths.tolist() == [4, 4, 4]
    never_sure = ModelDrafter(draft, "fp32", min_confidence=1.01)  # no probability reaches 1.01
    never_sure.begin(contexts)
    first, _, lengths = never_sure.propose(contexts, 4, 0.0, 1.0, None)
    assert first.tolist() == tokens[:, :1].tolist() and lengths.tolist() == [1, 1, 1]  # one forward, one token
    # per row: the rows whose first draft token had probability >= 0.3 go on
    half = ModelDrafter(draft, "fp32", min_confidence=0.3)
    half.begin(contexts)
    probs = torch.softmax(half._forward(*_first_inputs(half, contexts)), dim=-1)
    half.begin(contexts)
    _, _, lengths = half.propose(contexts, 2, 0.0, 1.0, None)
    sure = probs.gather(1, tokens[:, :1]).squeeze(1) >= 0.3
    assert sure.any() and not sure.all()  # probabilities 0.24, 0.38, 0.26: one row goes on
    assert lengths.tolist() == [2 if s else 1 for s in sure.tolist()]


def _first_inputs(drafter, contexts):
    """What `ModelDrafter.propose` feeds first right after `begin`: each prompt's last token."""
    ids = torch.tensor([[c[-1]] for c in contexts])
    return ids, torch.ones_like(ids), torch.tensor([[len(c) - 1] for c in contexts])


@pytest.mark.parametrize("kind", ["model", "subset", "confident", "lookup"])
def test_greedy_equals_the_target_alone_on_200_prompts(greedy_setup, kind):
    target, draft, tok, prompts, params, reference = greedy_setup
    drafter = _drafter(kind, draft, 64)
    engine = SpeculativeEngine(target, tok, drafter, k=4, precision="fp32")
    batched = [g[0].token_ids for g in engine.generate(prompts, params)]
    assert batched == reference  # batch of 200: rows accept different numbers of drafts
    alone = [engine.generate([p], params)[0][0].token_ids for p in prompts[:8]]
    assert alone == reference[:8]
    stats = engine.stats.summary()
    assert 0 < stats["acceptance_rate"] < 1 and stats["mean_acceptance_length"] > 1
    assert any(2 in r for r in reference)  # eos ends some rows early: rows leave the batch


def test_acceptance_is_counted_per_row_of_a_call(greedy_setup):
    """The per-row counts add up to the totals, and a prompt decoded alone gets the same counts in
    its row as the whole engine counts for it (the per-prompt acceptance of a held-out set)."""
    target, draft, tok, prompts, params, _ = greedy_setup
    engine = SpeculativeEngine(target, tok, ModelDrafter(draft, "fp32"), k=4, precision="fp32")
    engine.generate(prompts[:16], params)
    stats = engine.stats
    assert sorted(stats.proposed_by_row) == list(range(16))
    assert sum(stats.proposed_by_row.values()) == sum(stats.proposed_at)
    assert sum(stats.accepted_by_row.values()) == sum(stats.accepted_at)
    assert all(0 <= stats.accepted_by_row[r] <= stats.proposed_by_row[r] for r in range(16))
    assert len(set(stats.accepted_by_row.values())) > 1  # rows differ: the counts are not one figure
    engine.stats = type(stats)(k=4)
    engine.generate(prompts[3:4], params)
    assert engine.stats.proposed_by_row == {0: sum(engine.stats.proposed_at)}
    assert engine.stats.accepted_by_row == {0: sum(engine.stats.accepted_at)}


def test_speculative_engine_is_an_engine_with_the_targets_identity(greedy_setup):
    target, draft, tok, *_ = greedy_setup
    engine = SpeculativeEngine(target, tok, ModelDrafter(draft, "fp32"), precision="fp32")
    assert isinstance(engine, Engine)
    assert engine.identity == HFEngine(target, tok, precision="fp32").identity == model_state_hash(target, tok)
    with pytest.raises(ValueError, match="k >= 1"):
        SpeculativeEngine(target, tok, PromptLookupDrafter(), k=0)


def _sequence_probs(model, prompt: list[int], vocab: int, length: int) -> torch.Tensor:
    """Exact probability of every `length`-token continuation, in itertools.product order."""
    seqs = torch.tensor([prompt + list(s) for s in itertools.product(range(vocab), repeat=length)])
    with torch.no_grad():
        logp = torch.log_softmax(model(seqs).logits.float(), dim=-1)
    start = len(prompt) - 1
    steps = [logp[:, start + j].gather(1, seqs[:, start + j + 1, None]).squeeze(1) for j in range(length)]
    return torch.stack(steps, dim=1).sum(dim=1).exp()


@pytest.mark.parametrize("kind", ["model", "subset", "confident", "lookup"])
def test_sampled_output_has_the_targets_distribution(kind):
    vocab, length, rows = 6, 3, 8000
    target, draft = _peaked(vocab, seed=0), _peaked(vocab, seed=1)
    prompt = [3, 4, 5]
    exact, exact_draft = _sequence_probs(target, prompt, vocab, length), _sequence_probs(draft, prompt, vocab, length)
    engine = SpeculativeEngine(
        target, _IdsTokenizer(vocab, eos=None), _drafter(kind, draft, vocab), k=2, precision="fp32"
    )
    samples = engine.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=length, n=rows, seed=1))[0]
    index = {s: i for i, s in enumerate(itertools.product(range(vocab), repeat=length))}
    counts = torch.bincount(torch.tensor([index[tuple(c.token_ids)] for c in samples]), minlength=len(index))
    big = exact * rows >= 5  # chi-square wants >= 5 expected per cell: pool the rare ones

    def pvalue(probs):
        observed = torch.cat([counts[big], counts[~big].sum()[None]]).double()
        expected = torch.cat([probs[big], probs[~big].sum()[None]]).double()
        return chisquare(observed.numpy(), (expected / expected.sum() * rows).numpy()).pvalue

    assert engine.stats.summary()["acceptance_rate"] > 0.15  # drafts were really accepted
    assert pvalue(exact) > 0.001
    assert pvalue(exact_draft) < 1e-6  # the test can tell: the draft's own distribution is rejected
