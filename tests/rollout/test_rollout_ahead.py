"""`grpo.max_off_policy_steps: 1`: the next batch is sampled from the weights synced before this batch's
update, is stamped with their version and logged as one step stale, and carries the engine's
log-probs as the old policy."""

import copy

import torch

from tempering.config import GRPOSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.rollout.engine import HFEngine
from tempering.rollout.source import RolloutSource
from tempering.types import Task
from tests.conftest import tiny_llama


def engine_logps_under(model, batch, temperature=1.0):
    args = [getattr(batch, k) for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")]
    with torch.no_grad():
        logp, _ = grouped_logprobs(model.eval(), *args, temperature)
    return logp * batch.completion_mask


def test_the_prefetched_batch_is_one_step_stale_and_corrected(smol_tokenizer):
    trainer_model = tiny_llama(vocab=49152, seed=7)
    trainer_model.config.eos_token_id = smol_tokenizer.eos_token_id
    # an engine with its own copy of the weights (as a Ray replica has): sync_weights copies into it
    engine = HFEngine(copy.deepcopy(trainer_model), smol_tokenizer, precision="fp32")
    tasks = [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}, source="t") for i in range(12)
    ]
    settings = GRPOSettings(
        prompts_per_step=2, group_size=2, max_new_tokens=4, dynamic_sampling=False, max_off_policy_steps=1
    )
    source = RolloutSource(tasks, engine, settings, grad_accum=1, seed=0, model=trainer_model, precision="fp32")
    try:
        first = source.next_batch()  # sampled now from W0; batch 2 starts sampling from W0 too
        stats = source.stats()
        assert stats["staleness"] == 0 and first.old_logprobs is None
        assert (stats["stale_dropped_groups"], stats["stale_dropped_share"]) == (0.0, 0.0)
        assert (stats["staleness_max"], stats["staleness_hist/0"]) == (0.0, int(first.sampled_mask.sum()))
        state = source.state_dict()  # waits for the prefetched batch and records it
        assert (state["cursor"], state["rollouts"], state["ahead"][0]["index"]) == (4, 2, 1)
        recorded = [t for g in state["ahead"][0]["seen"] for t in g["trajectories"]]
        assert all(
            t["versions"] == [-1] * t["prompt_length"] + [0] * (len(t["token_ids"]) - t["prompt_length"])
            for t in recorded
        )
        assert [g["task"]["id"] for g in state["ahead"][0]["seen"]] == [tasks[i].id for i in source.order[2:4]]
        w0 = copy.deepcopy(trainer_model)
        with torch.no_grad():  # the trainer's update on batch 1: W0 -> W1
            for p in trainer_model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        w1 = copy.deepcopy(trainer_model)
        source.on_weights(1, step=1)  # what the Trainer tells its source after that update

        second = source.next_batch()  # prefetched: from W0, one step behind W1
        stats = source.stats()
        assert stats["staleness"] == 1
        assert (stats["stale_dropped_groups"], stats["stale_dropped_share"]) == (0.0, 0.0)  # 1 <= K: kept
        assert second.prompt_ids.shape[0] == 2  # both groups train
        sampled = second.sampled_mask.bool()
        assert bool((second.versions[sampled] == 0).all()) and bool((second.versions[~sampled] == -1).all())
        assert (stats["staleness_mean"], stats["staleness_max"]) == (1.0, 1.0)
        assert stats["staleness_hist/1"] == int(sampled.sum()) and "staleness_hist/0" not in stats
        assert torch.equal(second.old_logprobs, second.engine_logprobs)
        mask = second.completion_mask.bool()
        assert torch.allclose(second.engine_logprobs[mask], engine_logps_under(w0, second)[mask], atol=1e-4)
        assert not torch.allclose(second.engine_logprobs[mask], engine_logps_under(w1, second)[mask], atol=1e-2)

        third = source.next_batch()  # prefetched after W1 was synced
        assert bool((third.versions[third.sampled_mask.bool()] == 1).all())
        mask = third.completion_mask.bool()
        assert torch.allclose(third.engine_logprobs[mask], engine_logps_under(w1, third)[mask], atol=1e-4)
    finally:
        source.close()
