"""`reverse_kl_to_teacher`, the held-out figure of on-policy distillation: per reply, its exact
reverse KL summed over the reply's positions equals the whole-vocabulary KL computed by hand from
both models' full logits, the replies add up to the pooled per-token figures, and a student equal
to its teacher scores 0."""

import pytest
import torch

from tempering.config import EngineSettings, SamplingParams
from tempering.rollout.distill_source import reverse_kl_to_teacher
from tempering.rollout.select import build_engine
from tests.conftest import tiny_llama

VOCAB = 256
PARAMS = SamplingParams(n=3, max_new_tokens=8, temperature=1.0, seed=0)


@pytest.fixture(scope="module")
def setup(smol_tokenizer):
    student, teacher = (tiny_llama(vocab=VOCAB, seed=s).eval() for s in (1, 2))
    for m in (student, teacher):
        m.config.eos_token_id = VOCAB - 1
    prompts = [[t % VOCAB for t in smol_tokenizer.encode(s)] for s in ("What is 2+2?", "hello there")]
    engine = build_engine(EngineSettings(kind="batching"), student, smol_tokenizer, "fp32")
    return student, teacher, prompts, engine


def by_hand(student, teacher, prompt: list[int], reply: list[int]) -> tuple[float, float]:
    """Over the reply's positions, each from one full forward: the sums of sum_v p_s (log p_s - log p_t)
    and of log p_s(y) - log p_t(y) at the sampled tokens y."""
    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        s, t = (
            torch.log_softmax(m(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1) for m in (student, teacher)
        )
    picked = torch.tensor(reply)[:, None]
    return float((s.exp() * (s - t)).sum()), float((s.gather(1, picked) - t.gather(1, picked)).sum())


def test_per_reply_exact_reverse_kl_matches_the_full_logits(setup):
    student, teacher, prompts, engine = setup
    figures = reverse_kl_to_teacher(engine, student, teacher, prompts, PARAMS, "fp32")
    replies = figures["replies"]
    assert len(replies["exact"]) == len(replies["tokens"]) == len(prompts) * PARAMS.n
    assert sum(replies["tokens"]) == figures["tokens"] > 0
    assert sum(replies["exact"]) / figures["tokens"] == pytest.approx(figures["reverse_kl_exact_per_token"])
    assert sum(replies["one_sample"]) / figures["tokens"] == pytest.approx(figures["reverse_kl_per_token"], rel=1e-5)
    groups = engine.generate(prompts, PARAMS)  # seeded: the same replies again
    for i, completion in enumerate(c for group in groups for c in group):
        exact, one_sample = by_hand(student, teacher, prompts[i // PARAMS.n], list(completion.token_ids))
        assert replies["exact"][i] == pytest.approx(exact, rel=1e-4, abs=1e-5)
        assert replies["one_sample"][i] == pytest.approx(one_sample, rel=1e-4, abs=1e-5)


def test_a_student_equal_to_its_teacher_scores_zero(setup):
    student, _, prompts, engine = setup
    figures = reverse_kl_to_teacher(engine, student, student, prompts, PARAMS, "fp32")
    assert max(abs(x) for x in figures["replies"]["exact"]) < 1e-5
    assert abs(figures["reverse_kl_per_token"]) < 1e-5
