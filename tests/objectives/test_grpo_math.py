"""GRPO math against hand-derived values: advantages, clip-higher, every aggregation, k3 KL."""

import math

import pytest
import torch

from tempering.objectives.grpo_math import aggregate, grpo_advantages, grpo_loss, k3_kl


def test_group_advantages_with_and_without_std():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    # group 0: mean 0.5, population std 0.5 -> +-1; group 1: all equal -> 0
    assert torch.allclose(grpo_advantages(r)[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    assert grpo_advantages(r)[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert grpo_advantages(r, "dr_grpo").tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0] * 4]


# Two sequences. seq0: A=+1, ratios (1.5, 0.5), third token padding. seq1: A=-1, ratios (1.5, 0.5, 1.0).
RATIOS = torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
ADV = torch.tensor([1.0, -1.0])


def loss_of(**kw):
    logp = torch.log(RATIOS).requires_grad_(True)
    loss, stats = grpo_loss(logp, torch.zeros_like(RATIOS), ADV, MASK, **kw)
    return loss, stats, logp


# Per token, clip_low 0.2 / clip_high 0.28:
#   seq0: -min(1.5, 1.28) = -1.28 ; -min(0.5, 0.8) = -0.5
#   seq1: -min(-1.5, -1.28) = 1.5 ; -min(-0.5, -0.8) = 0.8 ; -min(-1, -1) = 1.0
TOKENS = [-1.28, -0.5, 1.5, 0.8, 1.0]


@pytest.mark.parametrize(
    "how,expected",
    [
        ("token_mean", sum(TOKENS) / 5),  # 1.52 / 5
        ("seq_mean", ((-1.28 - 0.5) / 2 + (1.5 + 0.8 + 1.0) / 3) / 2),  # (-0.89 + 1.1) / 2
        ("constant", sum(TOKENS) / (2 * 4)),  # / (B x max_tokens = 4)
    ],
)
def test_clip_higher_loss_for_every_aggregation(how, expected):
    loss, stats, _ = loss_of(clip_low=0.2, clip_high=0.28, aggregation=how, max_tokens=4)
    assert math.isclose(float(loss), expected, rel_tol=1e-5)
    assert math.isclose(float(stats["clip_fraction"]), 2 / 5, rel_tol=1e-6)  # seq0 tok0, seq1 tok1


def test_symmetric_clip_bounds_differ_from_clip_higher():
    sym, _, _ = loss_of(clip_low=0.2, clip_high=0.2)
    assert math.isclose(float(sym), (-1.2 - 0.5 + 1.5 + 0.8 + 1.0) / 5, rel_tol=1e-5)


def test_gradient_is_zero_where_clipped_and_minus_a_ratio_over_n_elsewhere():
    loss, _, logp = loss_of(clip_low=0.2, clip_high=0.28)
    loss.backward()
    g = logp.grad
    assert float(g[0, 0]) == 0.0  # clipped: no push beyond 1 + clip_high
    assert math.isclose(float(g[0, 1]), -1.0 * 0.5 / 5, rel_tol=1e-5)  # d(-A r)/dlogp = -A r, / 5 tokens
    assert math.isclose(float(g[1, 0]), 1.0 * 1.5 / 5, rel_tol=1e-5)
    assert float(g[0, 2]) == 0.0  # masked


def test_k3_kl_hand_value_and_in_loss():
    logp, ref = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
    # q = log 0.25 - log 0.5 = -log 2: exp(q) - q - 1 = 0.5 + log 2 - 1
    assert math.isclose(float(k3_kl(logp, ref)), 0.5 + math.log(2) - 1, rel_tol=1e-6)
    assert float(k3_kl(logp, logp)) == 0.0
    loss, stats = grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1), logp_ref=ref, beta=0.1)
    assert math.isclose(float(loss), 0.1 * (math.log(2) - 0.5), rel_tol=1e-5)
    assert math.isclose(float(stats["kl"]), math.log(2) - 0.5, rel_tol=1e-5)


def test_constant_aggregation_needs_max_tokens():
    with pytest.raises(ValueError, match="needs max_tokens"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "constant")


def test_aggregate_sum_splits_each_reduction_into_numerator_and_units():
    from tempering.objectives.grpo_math import aggregate_sum

    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # token_mean: (1+2+4+5+6) / 5 tokens; seq_mean: (1.5 + 5) / 2 seqs; constant: 18 / (2 x 4)
    assert [(float(n), u) for n, u in [aggregate_sum(per_token, mask, "token_mean")]] == [(18.0, 5.0)]
    num, units = aggregate_sum(per_token, mask, "seq_mean")
    assert (float(num), units) == (6.5, 2.0)
    num, units = aggregate_sum(per_token, mask, "constant", max_tokens=4)
    assert (float(num), units) == (18.0, 8.0)
    for how in ("token_mean", "seq_mean"):
        num, units = aggregate_sum(per_token, mask, how)
        assert torch.isclose(num / units, aggregate(per_token, mask, how))


def test_group_ids_give_the_same_advantages_as_rows_in_any_order():
    # groups {0: rewards 1, 0, 0, 1}, {1: 3, 1}: group 1 mean 2, population std 1 -> +-1
    rewards = torch.tensor([1.0, 3.0, 0.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 1, 0, 0, 1, 0])
    expected = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    assert torch.allclose(grpo_advantages(rewards, groups=groups), expected, atol=1e-5)
    assert grpo_advantages(rewards, "dr_grpo", groups=groups).tolist() == [0.5, 1.0, -0.5, -0.5, -1.0, 0.5]


def test_step_rewards_are_normalised_over_the_group_then_summed_from_each_token_on():
    # One group of two trajectories, 3 tokens each. Steps end at tokens marked 1:
    #   traj 0: steps end at t=0 (reward 1) and t=2 (reward 0)
    #   traj 1: one step ending at t=1 (reward 2)
    # group step rewards {1, 0, 2}: mean 1, population std sqrt(2/3)
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    steps = torch.tensor([[1, 0, 1], [0, 1, 0]])
    adv = grpo_advantages(rewards, groups=torch.tensor([0, 0]), step_mask=steps)
    s = math.sqrt(2 / 3)
    # normalised: traj 0 -> (0, ., -1/s), traj 1 -> (., 1/s, .); each token sums its step and later ones
    expected = [[0 - 1 / s, -1 / s, -1 / s], [1 / s, 1 / s, 0.0]]
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-5)
    unscaled = grpo_advantages(rewards, "dr_grpo", groups=torch.tensor([0, 0]), step_mask=steps)
    assert unscaled.tolist() == [[-1.0, -1.0, -1.0], [1.0, 1.0, 0.0]]


def test_outcome_reward_on_the_last_token_equals_the_sequence_advantage():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    groups = torch.zeros(4, dtype=torch.long)
    last = torch.tensor([[0, 1], [1, 0], [0, 1], [0, 1]])  # where each sequence ends
    per_token = grpo_advantages(rewards[:, None] * last, groups=groups, step_mask=last)
    outcome = grpo_advantages(rewards, groups=groups)
    assert torch.allclose(per_token[:, 0], outcome) and torch.allclose(per_token * last, outcome[:, None] * last)


def test_step_rewards_without_group_ids_are_refused():
    with pytest.raises(ValueError, match="group ids"):
        grpo_advantages(torch.ones(3))


def test_token_level_advantages_enter_the_loss_per_token():
    # one sequence, two tokens, ratio 1 (no clipping): loss = -(A_0 + A_1) / 2 with token_mean
    logp = torch.zeros(1, 2)
    loss, _ = grpo_loss(logp, logp, torch.tensor([[2.0, -1.0]]), torch.ones(1, 2))
    assert math.isclose(float(loss), -(2.0 - 1.0) / 2, rel_tol=1e-6)
