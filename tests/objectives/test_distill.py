"""Distillation: the KL and the mixed loss by hand; a layer-subset student; a student that
learns its teacher in the one Trainer."""

import math

import pytest
import torch

from tempering.config import TrainSettings
from tempering.data.batches import SFTBatches
from tempering.models.student import student_from_teacher
from tempering.objectives.distill import DistillObjective, distill_loss_sum, forward_kl_sum
from tempering.train.trainer import Trainer, evaluate
from tests.conftest import random_examples, tiny_llama


def test_forward_kl_by_hand():
    # teacher p = [1/4, 3/4] (logits 0, ln 3); student uniform [1/2, 1/2]:
    # KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812...
    teacher = torch.tensor([[0.0, math.log(3.0)]])
    student = torch.zeros(1, 2)
    expected = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert forward_kl_sum(student, teacher, 1.0).item() == pytest.approx(expected, rel=1e-6)
    # at T = 2 the same distributions come from doubled logits, and the KL is scaled by T^2 = 4
    assert forward_kl_sum(2 * student, 2 * teacher, 2.0).item() == pytest.approx(4 * expected, rel=1e-6)
    assert forward_kl_sum(teacher, teacher, 1.0).item() == pytest.approx(0.0, abs=1e-7)
    # two rows sum
    assert forward_kl_sum(student.repeat(2, 1), teacher.repeat(2, 1), 1.0).item() == pytest.approx(2 * expected)


def test_distill_loss_mixes_kl_and_cross_entropy():
    teacher = torch.tensor([[0.0, math.log(3.0)]])
    student = torch.zeros(1, 2)
    target = torch.tensor([1])
    kl = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    ce = math.log(2.0)  # the uniform student gives the target 1/2
    loss, stats = distill_loss_sum(student, teacher, target, 1.0, 0.25)
    assert loss.item() == pytest.approx(0.25 * kl + 0.75 * ce, rel=1e-6)
    assert stats == pytest.approx({"kl": kl, "ce": ce}, rel=1e-6)


def test_student_copies_the_chosen_teacher_layers():
    teacher = tiny_llama(seed=0).eval()
    ids = torch.tensor([[5, 9, 3, 17, 22]])
    whole = student_from_teacher(teacher, [0, 1]).eval()  # every layer: the teacher itself
    with torch.no_grad():
        assert torch.equal(whole(ids).logits, teacher(ids).logits)
    student = student_from_teacher(teacher, [1])
    assert student.config.num_hidden_layers == 1 and teacher.config.num_hidden_layers == 2
    assert torch.equal(student.model.layers[0].mlp.up_proj.weight, teacher.model.layers[1].mlp.up_proj.weight)
    assert student.model.layers[0].self_attn.layer_idx == 0  # its own KV-cache slot
    student.model.layers[0].mlp.up_proj.weight.data.add_(1.0)  # a copy, not a view of the teacher
    assert not torch.equal(student.model.layers[0].mlp.up_proj.weight, teacher.model.layers[1].mlp.up_proj.weight)
    with pytest.raises(ValueError, match=r"layers 0\.\.1"):
        student_from_teacher(teacher, [0, 2])


def test_student_learns_its_teacher_in_the_trainer(tmp_path):
    teacher = tiny_llama(seed=3)
    with torch.no_grad():
        teacher.lm_head.weight.mul_(20)  # peaked next-token distributions: a real target to match
    student = student_from_teacher(teacher, [0])
    objective = DistillObjective(teacher, temperature=1.0, kl_weight=1.0)
    settings = TrainSettings.model_validate(
        {"steps": 30, "batch_size": 8, "precision": "fp32", "optim": {"lr": 1e-3, "warmup_steps": 2}}
    )
    examples = random_examples(64, seed=1)
    held = SFTBatches(random_examples(16, seed=2), 16, 128, 0, True, seed=0).next_batch()
    before = evaluate(student, objective, [held], "fp32")
    Trainer(student, objective, SFTBatches(examples, 8, 128, 0, True, seed=0), settings, tmp_path).fit()
    after = evaluate(student, objective, [held], "fp32")
    assert after < 0.6 * before  # per-token KL to the teacher on held-out sequences (0.089 -> ~0.045)
    assert not any(p.requires_grad for p in teacher.parameters())


def _on_policy_batch(sampled: bool):
    from tempering.batches import GRPOBatch

    gen = torch.Generator().manual_seed(3)
    prompt_ids = torch.randint(3, 64, (1, 5), generator=gen)
    completion_ids = torch.randint(3, 64, (2, 6), generator=gen)
    mask = torch.ones_like(completion_ids)
    mask[1, 4:] = 0
    return GRPOBatch(
        prompt_ids=prompt_ids,
        prompt_mask=torch.ones_like(prompt_ids),
        completion_ids=completion_ids,
        completion_mask=mask,
        loss_mask=mask,
        sampled_mask=mask if sampled else torch.zeros_like(mask),  # a teacher step's replies: none sampled
        engine_logprobs=torch.zeros(2, 6),
        advantages=torch.zeros(2),
        n_real_tokens=int(mask.sum()),
    )


@pytest.mark.parametrize("sampled, expected", [(True, "reverse_kl"), (False, "forward_kl")])
def test_a_teacher_divergence_applies_on_the_teachers_replies_only(sampled, expected):
    # reverse KL where the student sampled, forward KL on a batch of the teacher's greedy replies
    # (sampled_mask 0): the loss equals that divergence summed over the scored positions
    from tempering.models.logprobs import grouped_hidden
    from tempering.objectives import divergences
    from tempering.objectives.distill import OnPolicyDivergenceObjective

    teacher, student = tiny_llama(vocab=64, seed=5), tiny_llama(vocab=64, seed=6)
    with torch.no_grad():
        teacher.lm_head.weight.mul_(30.0)  # peaked: the two KLs are far apart
    batch = _on_policy_batch(sampled)
    objective = OnPolicyDivergenceObjective(teacher, "reverse_kl", None, 1.0, [], teacher_divergence="forward_kl")
    loss, stats = objective.loss(student, batch)
    keep = batch.loss_mask.bool()
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    with torch.no_grad():
        s, t = (torch.log_softmax(m.lm_head(grouped_hidden(m, *args)[keep]).float(), -1) for m in (student, teacher))
    by_hand = getattr(divergences, expected)(s, t).sum()
    other = getattr(divergences, "forward_kl" if expected == "reverse_kl" else "reverse_kl")(s, t).sum()
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-5)
    assert abs(float(by_hand) - float(other)) > 0.1 * float(by_hand)  # the two differ: the choice is seen
    assert ("reverse_kl" in stats) is sampled


def test_beta_reaches_jsd_only():
    # divergence: a plug-in (no beta), teacher_divergence: jsd with beta 0.3: jsd gets 0.3, the
    # plug-in is called with the two distributions alone (it once received jsd's beta as well)
    from tempering.algorithms import REGISTRY, register_divergence
    from tempering.objectives import divergences
    from tempering.objectives.distill import OnPolicyDivergenceObjective

    calls: list[dict] = []

    @register_divergence("keyword_recorder")
    def keyword_recorder(student_logp, teacher_logp, **keywords):
        calls.append(keywords)
        return divergences.reverse_kl(student_logp, teacher_logp)

    try:
        teacher = tiny_llama(vocab=64, seed=5)
        objective = OnPolicyDivergenceObjective(
            teacher, "keyword_recorder", {"beta": 0.3}, 1.0, [], teacher_divergence="jsd"
        )
        s, t = torch.log_softmax(torch.randn(4, 64), -1), torch.log_softmax(torch.randn(4, 64), -1)
        objective.divergence(s, t)
        assert calls == [{}]
        jsd = objective.teacher_divergence(s, t)
        torch.testing.assert_close(jsd, divergences.generalized_jsd(s, t, beta=0.3))
        assert not torch.allclose(jsd, divergences.generalized_jsd(s, t))  # 0.3, not the default 0.5
    finally:
        REGISTRY.pop(("divergence", "keyword_recorder"), None)


@pytest.mark.parametrize("sampled", [True, False])
def test_teacher_kl_weight_mixes_cross_entropy_into_the_teachers_replies_only(sampled):
    # teacher_kl_weight 0.8 with forward KL: a batch of the teacher's replies takes
    # 0.8 * forward KL + 0.2 * cross-entropy on its tokens; a batch of the student's samples is untouched
    from tempering.models.logprobs import grouped_hidden
    from tempering.objectives import divergences
    from tempering.objectives.distill import OnPolicyDivergenceObjective

    teacher, student = tiny_llama(vocab=64, seed=5), tiny_llama(vocab=64, seed=6)
    batch = _on_policy_batch(sampled)
    objective = OnPolicyDivergenceObjective(
        teacher, "reverse_kl", None, 1.0, [], teacher_divergence="forward_kl", teacher_kl_weight=0.8
    )
    loss, _ = objective.loss(student, batch)
    keep = batch.loss_mask.bool()
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    with torch.no_grad():
        s, t = (torch.log_softmax(m.lm_head(grouped_hidden(m, *args)[keep]).float(), -1) for m in (student, teacher))
    ce = -s.gather(1, batch.completion_ids[keep][:, None]).sum()
    if sampled:
        by_hand = divergences.reverse_kl(s, t).sum()
    else:
        by_hand = 0.8 * divergences.forward_kl(s, t).sum() + 0.2 * ce
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-5)
    assert float(ce) > 2 * float(divergences.forward_kl(s, t).sum())  # the mix differs from KL alone


def _whole_vocabulary(student, teacher, targets, temperature, kl_weight):
    """The unchunked loss as it was written: every (N, V) log-softmax at once."""
    t_logp = torch.log_softmax(teacher.float() / temperature, dim=-1)
    s_logp = torch.log_softmax(student.float() / temperature, dim=-1)
    kl = temperature**2 * (t_logp.exp() * (t_logp - s_logp)).sum()
    ce = torch.nn.functional.cross_entropy(student.float(), targets, reduction="sum")
    return kl_weight * kl + (1 - kl_weight) * ce


def test_distillation_over_row_chunks_equals_the_whole_vocabulary_loss(monkeypatch):
    from tempering.objectives import chunked

    gen = torch.Generator().manual_seed(0)
    student = torch.randn(37, 50, generator=gen, dtype=torch.float64).float().requires_grad_()
    teacher, targets = 3 * torch.randn(37, 50, generator=gen), torch.randint(0, 50, (37,), generator=gen)
    expected = _whole_vocabulary(student, teacher, targets, 2.0, 0.7)
    (want,) = torch.autograd.grad(expected, student)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 4 * 50 * 5)  # 5 rows a chunk: 8 chunks, the last of 2
    assert chunked.chunk_rows(50) == 5
    loss, _ = distill_loss_sum(student, teacher, targets, 2.0, 0.7)
    (got,) = torch.autograd.grad(loss, student)
    assert abs(float(loss) - float(expected)) <= 1e-6 * abs(float(expected))
    assert (got - want).abs().max() <= 1e-6


def _peak_bytes(step) -> int:
    """The most bytes of CPU tensors alive at once while `step` runs (torch's memory profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def test_a_long_distillation_step_holds_no_several_full_vocabulary_copies(monkeypatch):
    """2048 positions x 8192 tokens (64 MiB per fp32 copy), forward and backward: the whole-vocabulary
    loss peaks at several copies; over 256-row chunks only the student's gradient is one whole copy."""
    from tempering.objectives import chunked

    n, vocab = 2048, 8192
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 4 * vocab * 256)
    gen = torch.Generator().manual_seed(1)
    student = torch.randn(n, vocab, generator=gen).requires_grad_()
    teacher, targets = torch.randn(n, vocab, generator=gen), torch.randint(0, vocab, (n,), generator=gen)
    copy = n * vocab * 4

    def step(loss_fn):
        student.grad = None
        loss_fn().backward()

    whole = _peak_bytes(lambda: step(lambda: _whole_vocabulary(student, teacher, targets, 1.0, 0.5)))
    rows = _peak_bytes(lambda: step(lambda: distill_loss_sum(student, teacher, targets, 1.0, 0.5)[0]))
    print(f"peak: whole {whole / copy:.2f}, chunked {rows / copy:.2f} N x V fp32 copies")
    assert whole >= 4 * copy  # the unchunked loss: several N x V fp32 tensors alive together
    assert rows <= 1.5 * copy  # the gradient (one copy) and a few 256-row slices


@pytest.mark.parametrize("sampled", [True, False])
def test_on_policy_divergence_over_row_chunks_equals_one_chunk(monkeypatch, sampled):
    """Loss, gradients and logged figures are the same with one row a chunk as with all rows in one."""
    from tempering.objectives import chunked
    from tempering.objectives.distill import OnPolicyDivergenceObjective

    teacher, student = tiny_llama(vocab=64, seed=5), tiny_llama(vocab=64, seed=6)
    batch = _on_policy_batch(sampled)
    objective = OnPolicyDivergenceObjective(
        teacher,
        "jsd",
        {"beta": 0.3},
        1.5,
        [],
        sampling_temperature=1.0,
        teacher_divergence="forward_kl",
        teacher_kl_weight=0.8,
    )

    def run(chunk_bytes):
        monkeypatch.setattr(chunked, "CHUNK_BYTES", chunk_bytes)
        student.zero_grad(set_to_none=True)
        loss, stats = objective.loss(student, batch)
        loss.backward()
        return loss, stats, [p.grad.clone() for p in student.parameters() if p.grad is not None]

    whole, one_row = run(1 << 40), run(4 * 64)
    assert abs(float(whole[0]) - float(one_row[0])) <= 1e-6 * abs(float(whole[0]))
    assert whole[1].keys() == one_row[1].keys()
    for key in whole[1]:
        assert float(whole[1][key]) == pytest.approx(float(one_row[1][key]), rel=1e-5, abs=1e-6)
    assert max((a - b).abs().max().item() for a, b in zip(whole[2], one_row[2])) <= 1e-6
