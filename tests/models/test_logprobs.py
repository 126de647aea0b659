"""The one log-prob module against HF's own forward (full logits) and hand-derived values."""

import math

import torch

from tempering.models.logprobs import head_logprobs, sequence_logprob_sums, token_logprobs
from tests.conftest import tiny_llama


def test_head_logprobs_hand_derived_with_temperature_and_entropy():
    head = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.eye(2))  # logits are the hidden states
    hidden = torch.tensor([[[math.log(3.0), 0.0], [9.0, 9.0]]])
    logp, entropy = head_logprobs(
        head, hidden, torch.tensor([[0, -100]]), torch.tensor([[1, 0]]), temperature=2.0, with_entropy=True
    )
    # logits / 2 = (log 3 / 2, 0): p(0) = sqrt3 / (sqrt3 + 1); the masked position stays 0
    p0 = math.sqrt(3) / (math.sqrt(3) + 1)
    assert math.isclose(float(logp[0, 0]), math.log(p0), rel_tol=1e-6) and float(logp[0, 1]) == 0.0
    assert math.isclose(float(entropy[0, 0]), -(p0 * math.log(p0) + (1 - p0) * math.log(1 - p0)), rel_tol=1e-6)


def test_token_logprobs_match_hf_full_logits_and_sum_over_the_loss_mask():
    model = tiny_llama(seed=2)
    ids = torch.randint(3, 64, (2, 7))
    attn = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])  # row 0 left-padded
    loss_mask = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 1]])
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, attn, loss_mask)
        sums = sequence_logprob_sums(model, ids, attn, loss_mask)
        pos = (attn.cumsum(1) - 1).clamp(min=0)
        full = torch.log_softmax(model(input_ids=ids, attention_mask=attn, position_ids=pos).logits.float(), -1)
    oracle = torch.zeros_like(logp)
    oracle[:, 1:] = full[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2) * loss_mask[:, 1:]
    assert torch.allclose(logp, oracle, atol=1e-5)
    assert torch.allclose(sums, oracle.sum(1), atol=1e-5) and sums.shape == (2,)


def test_chunked_head_logprobs_equal_the_one_shot_path_in_loss_gradients_and_entropy():
    from tempering.objectives.sft import masked_nll_sum

    model = tiny_llama(vocab=96).float()
    ids = torch.randint(3, 96, (2, 40), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[0, :9] = -100  # a prompt with no loss, so chunks straddle masked and scored positions
    results = []
    for chunk, recompute in ((None, False), (7, False), (7, True)):
        model.zero_grad()
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
        loss, n = masked_nll_sum(hidden, model.get_output_embeddings(), labels, chunk_tokens=chunk, recompute=recompute)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        with torch.no_grad():
            _, entropy = head_logprobs(model.get_output_embeddings(), hidden, ids, labels != -100, 0.7, True, chunk)
        results.append((loss.detach(), grads, entropy))
    assert int(n) == 2 * 39 - 8  # targets are labels[:, 1:]
    loss_a, grads_a, ent_a = results[0]
    for loss_b, grads_b, ent_b in results[1:]:
        assert torch.allclose(loss_a, loss_b, atol=1e-5, rtol=0)
        assert all(torch.allclose(a, b, atol=1e-5, rtol=0) for a, b in zip(grads_a, grads_b, strict=True))
        assert ent_a is not None and ent_b is not None and torch.allclose(ent_a, ent_b, atol=1e-5, rtol=0)


def test_the_head_chunks_are_recomputed_in_the_backward_only_under_activation_checkpointing():
    """SFT's loss: 1,100 targets take two head chunks; checkpointing runs both again in the backward."""
    from tempering.batches import SFTBatch
    from tempering.models.checkpointing import enable_checkpointing
    from tempering.models.logprobs import LOGPROB_CHUNK_TOKENS
    from tempering.objectives.sft import SFTObjective

    ids = torch.randint(3, 96, (2, 601), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :51] = -100  # targets are labels[:, 1:]: 2 x 550
    assert LOGPROB_CHUNK_TOKENS < 1100 <= 2 * LOGPROB_CHUNK_TOKENS
    batch = SFTBatch(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    calls = []
    for checkpointed in (False, True):
        model = tiny_llama(vocab=96).float().train()
        if checkpointed:
            enable_checkpointing(model)
        model.get_output_embeddings().register_forward_hook(lambda *_, on=checkpointed: calls.append(on))
        loss, _ = SFTObjective().loss(model, batch)
        loss.backward()
    assert calls.count(False) == 2 and calls.count(True) == 4
