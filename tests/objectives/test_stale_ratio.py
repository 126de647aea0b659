"""The importance ratio of a stale token is p_train / p_behaviour with the behaviour log-prob the
sampler recorded for that token, whatever version sampled it: by hand, per token, through the
one-step-ahead path's old policy (the engine's log-probs) and the registered losses' pure functions."""

import math

import pytest
import torch

from tempering.objectives.grpo_math import grpo_loss_sum
from tempering.objectives.policy_losses import clipped_weight_loss, token_clipped_loss
from tempering.rollout.grpo_batches import GroupRows, grpo_micro_batches
from tempering.types import Reward, Trajectory


def _traj(behaviour: list[float], version: int) -> Trajectory:
    completion = list(range(10, 10 + len(behaviour)))
    return Trajectory(
        task_id="t",
        messages=[],
        token_ids=[5, 6] + completion,
        loss_mask=[0, 0] + [1] * len(completion),
        logprobs=[0.0, 0.0] + behaviour,  # what the sampler recorded for each of its tokens
        prompt_length=2,
        rewards=[Reward(value=0.0)],
        versions=[-1, -1] + [version] * len(completion),
    )


@pytest.fixture()
def stale_batch():
    """One group of two replies: one sampled by version 4, one by version 5 (the trainer is at 5),
    built as the one-step-ahead sampler builds its batches (old policy = the engine's log-probs)."""
    a = _traj([-1.0, -2.0, -0.5], version=4)
    b = _traj([-0.3, -1.2, -0.7], version=5)
    rows = GroupRows([5, 6], [a, b], [[1, 1, 1]] * 2, [[1, 1, 1]] * 2, torch.tensor([1.0, -1.0]))
    (batch,) = grpo_micro_batches([rows], 1, lambda batch: batch.engine_logprobs.clone())
    return batch


# the trainer's log-probs of the same tokens: ratios 1.5, 0.5, 1 (version 4) and 1.1, 0.7, 1.35 (version 5)
RATIOS = [[1.5, 0.5, 1.0], [1.1, 0.7, 1.35]]


def close(tensor, expected):
    torch.testing.assert_close(tensor, torch.tensor(expected), atol=1e-6, rtol=0)


def _new_logp(batch):
    return batch.old_logprobs + torch.log(torch.tensor(RATIOS))


def test_the_clipped_loss_of_each_stale_token_is_the_hand_computed_one(stale_batch):
    assert stale_batch.versions.tolist() == [[4, 4, 4], [5, 5, 5]]
    close(stale_batch.old_logprobs, [[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7]])
    logp = _new_logp(stale_batch)
    adv = stale_batch.advantages.unsqueeze(1).expand_as(logp)
    per_token, clipped = token_clipped_loss(
        logp, stale_batch.old_logprobs, adv, stale_batch.loss_mask, clip_low=0.2, clip_high=0.28
    )
    # A = +1: -min(r, clip(r, 0.8, 1.28)); A = -1: max(r, clip(r, 0.8, 1.28))
    expected = [[-1.28, -0.5, -1.0], [1.1, 0.8, 1.35]]
    close(per_token, expected)
    assert clipped.tolist() == [[True, False, False], [False, True, False]]
    numerator, stats = grpo_loss_sum(
        logp, stale_batch.old_logprobs, stale_batch.advantages, stale_batch.loss_mask, 0.2, 0.28, loss="dapo"
    )
    assert float(numerator) == pytest.approx(sum(map(sum, expected)), abs=1e-6)  # token_mean: summed here
    assert float(stats["ratio_mean"]) == pytest.approx(sum(map(sum, RATIOS)) / 6, abs=1e-6)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 6)


def test_cispo_caps_the_weight_of_each_stale_token_by_hand(stale_batch):
    logp = _new_logp(stale_batch)
    adv = stale_batch.advantages.unsqueeze(1).expand_as(logp)
    per_token, capped = clipped_weight_loss(
        logp, stale_batch.old_logprobs, adv, stale_batch.loss_mask, clip_low=0.2, clip_high=0.28
    )
    weights = [[min(r, 1.28) for r in row] for row in RATIOS]
    logps = [
        [b + math.log(r) for b, r in zip(bs, rs)] for bs, rs in zip([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7]], RATIOS)
    ]
    expected = [[-w * a * lp for w, lp in zip(ws, lps)] for ws, lps, a in zip(weights, logps, (1.0, -1.0))]
    close(per_token, expected)
    assert capped.tolist() == [[True, False, False], [False, False, True]]
