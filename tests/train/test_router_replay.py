"""Router replay: the engine records each token's experts while it samples, the GRPO batch lays
them out like its tokens, and the trainer's forward pass under replay routes exactly so."""

import pytest
import torch

from tempering.config import GRPOSettings, MoESettings, SamplingParams, TrainSettings
from tempering.models.routing import RouterTap
from tempering.objectives.grpo import GRPOObjective
from tempering.rollout.engine import HFEngine
from tempering.rollout.grpo_batches import GroupRows, grpo_tensors
from tempering.train.moe import MoEWatch
from tempering.types import Reward, Trajectory
from tests.conftest import tiny_moe


class IdsTokenizer:
    """The few tokenizer fields the engine reads, for a vocabulary of bare ids."""

    pad_token_id, eos_token_id = 0, 2

    def decode(self, ids, **kwargs) -> str:
        return " ".join(map(str, ids))


PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12]]


def sampled(model):
    engine = HFEngine(model, IdsTokenizer(), precision="fp32", record_routing=True)
    return engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=3))


def test_the_engine_records_the_experts_a_whole_row_forward_chooses():
    model = tiny_moe(seed=1).eval()
    for prompt, group in zip(PROMPTS, sampled(model)):
        for c in group:
            assert c.routing is not None and c.routing.shape == (len(prompt) + len(c.token_ids), 2, 2)
            ids = torch.tensor([prompt + c.token_ids])
            with RouterTap(model) as tap, torch.enable_grad():
                model(ids)
            whole = torch.stack([tap.records[layer][0][1] for layer in range(2)], dim=1)
            assert torch.equal(c.routing[:-1].long().sort(-1).values, whole[:-1].sort(-1).values)
            assert (c.routing[-1] == -1).all()  # the last sampled token was never read


def batch_of(groups):
    rows = []
    for prompt, group in zip(PROMPTS, groups):
        trajs = [
            Trajectory(
                task_id="t",
                sample=j,
                messages=[],
                token_ids=prompt + c.token_ids,
                loss_mask=[0] * len(prompt) + [1] * len(c.token_ids),
                logprobs=[0.0] * len(prompt) + c.logprobs,
                prompt_length=len(prompt),
                rewards=[Reward(value=float(j))],
                routing=c.routing.tolist(),
            )
            for j, c in enumerate(group)
        ]
        masks = [[1] * len(c.token_ids) for c in group]
        rows.append(GroupRows(prompt, trajs, masks, masks, torch.tensor([1.0, -1.0])))
    return grpo_tensors(rows)


def test_replay_follows_the_rollout_routing_through_the_grpo_batch():
    model = tiny_moe(seed=1).eval()
    batch = batch_of(sampled(model))
    assert batch.prompt_routing is not None and batch.prompt_routing.shape[:2] == batch.prompt_ids.shape
    assert batch.completion_routing is not None and batch.completion_routing.shape[:2] == batch.completion_ids.shape
    objective = GRPOObjective(GRPOSettings(max_new_tokens=6))
    for replay in (False, True):
        watch = MoEWatch(model, MoESettings(router_replay=replay))
        with watch.tap(batch) as tap:
            _, stats = objective.loss(model, batch)
        assert float(stats["logprob_mismatch"]) < 1e-4  # same model, fp32: both routings agree here
        routed = tap.records[0][1][1].reshape(batch.completion_ids.shape[0], -1, 2)
        recorded = batch.completion_routing[:, :, 0]
        seen = recorded[..., 0] >= 0
        assert torch.equal(routed[seen].sort(-1).values, recorded[seen].sort(-1).values)


def test_replay_without_rollout_routing_and_with_checkpointing_are_refused():
    model = tiny_moe()
    watch = MoEWatch(model, MoESettings(router_replay=True))
    with pytest.raises(ValueError, match="this batch carries no rollout routing"):
        watch.tap({"input_ids": torch.ones(1, 3, dtype=torch.long)})
    with pytest.raises(ValueError, match="turn one of them off"):
        TrainSettings.model_validate({"steps": 1, "gradient_checkpointing": True, "moe": {"router_replay": True}})
