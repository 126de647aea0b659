"""mu > 1: the rollout policy's log-probs are recomputed where the model lives."""

import pytest
import torch

from tempering.config import GRPOSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.rollout.engine import HFEngine
from tempering.rollout.source import RolloutSource
from tempering.types import Task
from tests.conftest import tiny_llama

KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")


def _batch(smol_tokenizer, device):
    model = tiny_llama(vocab=49152, seed=7).to(device)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    tasks = [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}, source="test")
        for i in range(8)
    ]
    settings = GRPOSettings(
        prompts_per_step=2, group_size=2, max_new_tokens=4, updates_per_batch=2, dynamic_sampling=False
    )
    source = RolloutSource(
        tasks,
        HFEngine(model, smol_tokenizer, precision="fp32"),
        settings,
        grad_accum=1,
        seed=0,
        model=model,
        precision="fp32",
    )
    return model, source.next_batch()


def test_old_logprobs_are_the_models_own_recompute(smol_tokenizer):
    model, batch = _batch(smol_tokenizer, "cpu")
    with torch.no_grad():
        expected, _ = grouped_logprobs(model.eval(), *(getattr(batch, k) for k in KEYS))
    assert batch.old_logprobs.device == batch.prompt_ids.device
    assert torch.allclose(batch.old_logprobs, expected, atol=1e-6)


@pytest.mark.gpu(covers=["pinned-copy"])
def test_old_logprobs_run_on_the_models_device(smol_tokenizer):
    # Before the fix the CPU batch went straight into a CUDA model: a device-mismatch RuntimeError.
    model, batch = _batch(smol_tokenizer, "cuda")
    assert batch.old_logprobs.device.type == "cpu" and torch.isfinite(batch.old_logprobs).all()
