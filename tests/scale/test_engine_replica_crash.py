"""A rollout engine replica killed between steps (its Ray actor process gone) is replaced: the
fresh one gets the trainer's last synced weights and samples the dead one's prompts again with
the same seed, so the step gets the very completions it would have had, none lost or redrawn."""

import pytest
import torch

pytest.importorskip("ray")
import ray

from tempering.config import SamplingParams, ScaleSettings
from tempering.scale.engines import EngineReplicas
from tempering.scale.runtime import ray_session
from tests.conftest import tiny_llama


@pytest.mark.slow
def test_a_killed_engine_replica_is_replaced_with_the_synced_weights_and_samples_again(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    base = tiny_llama(vocab=49152, seed=5)
    base.config.eos_token_id = smol_tokenizer.eos_token_id
    base.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    trainer = tiny_llama(vocab=49152, seed=5)
    with torch.no_grad():  # the trainer has moved away from the base on disk: a replacement needs the sync
        for p in trainer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    with ray_session(ScaleSettings(num_cpus=2)):
        engine = EngineReplicas(str(path), None, "fp32", replicas=2, cpus=0.5)
        try:
            engine.sync_weights(trainer)
            prompts = [engine.chat_prompt([{"role": "user", "content": f"say {i}"}]) for i in range(4)]
            params = SamplingParams(n=2, max_new_tokens=6, seed=11)
            before = engine.generate(prompts, params)
            ray.kill(engine.actors[1])  # replica 1 (prompts 2 and 3) dies
            after = engine.generate(prompts, params)
        finally:
            engine.close()
    assert engine.replaced == 1
    assert [[(c.prompt_index, c.token_ids) for c in g] for g in after] == [
        [(c.prompt_index, c.token_ids) for c in g] for g in before
    ]
