"""The GRPO objective's `logprob_mismatch` is measured where the engine sampled (`sampled_mask`):
an agent batch's environment tokens carry a placeholder engine log-prob 0 and must not count."""

from dataclasses import replace

import torch

from tempering.batches import GRPOBatch
from tempering.config import GRPOSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.objectives.grpo import GRPOObjective
from tests.conftest import tiny_llama


def test_mismatch_counts_only_sampled_tokens():
    model = tiny_llama(vocab=64, seed=0).eval()
    prompt_ids, prompt_mask = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    completion_ids = torch.tensor([[8, 9, 10, 11, 12, 13], [14, 15, 16, 17, 18, 19]])
    completion_mask = torch.ones_like(completion_ids)
    sampled = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 1, 1]])  # 0: environment tokens
    with torch.no_grad():
        logp, _ = grouped_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    engine = logp * sampled  # the engine's log-probs where it sampled, 0 elsewhere (as agent episodes store)
    batch = GRPOBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        loss_mask=sampled,
        sampled_mask=sampled,
        engine_logprobs=engine,
        advantages=torch.tensor([1.0, -1.0]),
        n_real_tokens=15,
    )
    s = GRPOSettings(max_new_tokens=6)
    with torch.no_grad():
        _, unmasked = GRPOObjective(s).loss(model, replace(batch, sampled_mask=completion_mask))
        _, masked = GRPOObjective(s).loss(model, batch)
    env = 1 - sampled
    assert abs(unmasked["logprob_mismatch"] - float((logp.abs() * env).sum() / 12)) < 1e-5  # the old reading
    assert unmasked["logprob_mismatch"] > 1.0  # ~log(64) per environment token at random init
    assert masked["logprob_mismatch"] < 1e-5
