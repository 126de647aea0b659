"""The registered GRPO-family variants against hand-derived values: advantage estimators (RLOO,
REINFORCE++ with and without the group baseline), GSPO's sequence ratio, CISPO's clipped weight,
BNPO's micro-batch token mean, TIS / MIS weights, DAPO's overlong shaping, KTO and ORPO."""

import math

import pytest
import torch

from tempering.objectives.advantages import overlong_penalty
from tempering.objectives.grpo_math import aggregate_sum, grpo_advantages, grpo_loss
from tempering.objectives.off_policy import importance_weights
from tempering.objectives.preference import preference_losses

# two groups: {1, 0, 0, 1} and {3, 1}
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1])


def assert_close(actual: torch.Tensor, expected: list[float], atol: float = 1e-5) -> None:
    assert torch.allclose(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol), actual.tolist()


def test_rloo_is_the_leave_one_out_baseline():
    # group 0: 1 - (0 + 0 + 1)/3 = 2/3, 0 - (1 + 0 + 1)/3 = -2/3; group 1: 3 - 1 = 2, 1 - 3 = -2
    assert_close(grpo_advantages(REWARDS, "rloo", groups=GROUPS), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0])
    assert grpo_advantages(torch.tensor([5.0]), "rloo", groups=torch.tensor([0])).tolist() == [0.0]  # no other sample


def test_reinforce_pp_normalises_over_the_batch_not_the_group():
    # batch mean 1, centred (0, -1, -1, 0, 2, 0), population variance 6/6 = 1
    assert_close(grpo_advantages(REWARDS, "reinforce_pp", groups=GROUPS), [0.0, -1.0, -1.0, 0.0, 2.0, 0.0])


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_whitens_over_the_batch():
    # group-centred (.5, -.5, -.5, .5, 1, -1): mean 0, variance (4 x .25 + 2 x 1) / 6 = 1/2
    s = math.sqrt(0.5)
    expected = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 1 / s, -1 / s]
    assert_close(grpo_advantages(REWARDS, "reinforce_pp_baseline", groups=GROUPS), expected)


# Two sequences: seq0 A=+1, token ratios (1.5, 0.5), third token padding; seq1 A=-1, ratios (1.5, 0.5, 1.0).
RATIOS = torch.tensor([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
ADV = torch.tensor([1.0, -1.0])


def loss_and_grad(loss: str, ratios: torch.Tensor = RATIOS, **kw):
    logp = torch.log(ratios).requires_grad_(True)
    value, stats = grpo_loss(logp, torch.zeros_like(ratios), ADV, MASK, loss=loss, max_tokens=4, **kw)
    value.backward()
    return value.detach(), stats, logp.grad


def test_gspo_uses_the_geometric_mean_ratio_of_each_sequence():
    # s0 = (1.5 x 0.5)^(1/2), s1 = (1.5 x 0.5 x 1)^(1/3), both inside [0.8, 1.28]: loss (-s0 + s1) / 2
    s0, s1 = 0.75**0.5, 0.75 ** (1 / 3)
    value, stats, grad = loss_and_grad("gspo", clip_low=0.2, clip_high=0.28)
    assert math.isclose(float(value), (-s0 + s1) / 2, rel_tol=1e-5)
    assert float(stats["clip_fraction"]) == 0.0
    # d/dlogp_t of -A s over the sequence's mean: -A s / |y|, then / 2 sequences
    assert_close(grad, [[-s0 / 4, -s0 / 4, 0.0], [s1 / 6, s1 / 6, s1 / 6]])


def test_gspo_clips_a_whole_sequence():
    ratios = torch.tensor([[2.0, 2.0, 1.0], [1.0, 1.0, 1.0]])  # s0 = 2 > 1.28 with A > 0: clipped, no gradient
    value, stats, grad = loss_and_grad("gspo", ratios, clip_low=0.2, clip_high=0.28)
    assert math.isclose(float(value), (-1.28 + 1.0) / 2, rel_tol=1e-5)
    assert grad[0].abs().sum() == 0 and math.isclose(float(stats["clip_fraction"]), 2 / 5, rel_tol=1e-6)


def test_cispo_clips_the_weight_and_keeps_every_token_s_gradient():
    # weights min(r, 1.28) detached: seq0 (1.28, 0.5), seq1 (1.28, 0.5, 1.0); loss -w A log r, token mean over 5
    value, stats, grad = loss_and_grad("cispo", clip_low=0.2, clip_high=0.28)
    tokens = [-1.28 * math.log(1.5), -0.5 * math.log(0.5), 1.28 * math.log(1.5), 0.5 * math.log(0.5), 0.0]
    assert math.isclose(float(value), sum(tokens) / 5, rel_tol=1e-5)
    # unlike the clipped surrogate, the clipped token (seq0 t0) still pushes: -w A / 5
    assert_close(grad, [[-1.28 / 5, -0.5 / 5, 0.0], [1.28 / 5, 0.5 / 5, 1.0 / 5]])
    assert math.isclose(float(stats["clip_fraction"]), 2 / 5, rel_tol=1e-6)


def test_dr_grpo_and_grpo_and_dapo_differ_only_in_aggregation():
    tokens = [-1.28, -0.5, 1.5, 0.8, 1.0]  # the clipped surrogate per token (test_grpo_math)
    expected = {
        "dapo": sum(tokens) / 5,
        "grpo": ((-1.28 - 0.5) / 2 + (1.5 + 0.8 + 1.0) / 3) / 2,
        "dr_grpo": sum(tokens) / (2 * 4),
        "bnpo": sum(tokens) / 5,  # one micro-batch: its token mean
    }
    for loss, value in expected.items():
        got, _, _ = loss_and_grad(loss, clip_low=0.2, clip_high=0.28)
        assert math.isclose(float(got), value, rel_tol=1e-5), loss


def test_micro_token_mean_averages_micro_batches_not_tokens():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    num_a, units_a = aggregate_sum(per_token[:1], mask[:1], "micro_token_mean")  # 1.5 over 1
    num_b, units_b = aggregate_sum(per_token[1:], mask[1:], "micro_token_mean")  # 5 over 1
    assert (float(num_a), units_a, float(num_b), units_b) == (1.5, 1.0, 5.0, 1.0)
    assert (float(num_a) + float(num_b)) / (units_a + units_b) == 3.25  # token_mean would give 18 / 5


# The trainer's old log-probs give ratios (3, 0.5, 1.5) to the engine's; the third token was not sampled.
OLD = torch.log(torch.tensor([[3.0, 0.5, 1.5]]))
ROLLOUT = torch.zeros(1, 3)
SAMPLED = torch.tensor([[1, 1, 0]])


@pytest.mark.parametrize(
    "mode,cap,floor,weights,corrected",
    [
        ("token_truncate", 2.0, None, [[2.0, 0.5, 1.0]], 1 / 2),
        ("token_truncate", 2.0, 0.6, [[2.0, 0.6, 1.0]], 2 / 2),
        ("token_mask", 2.0, None, [[0.0, 0.5, 1.0]], 1 / 2),
        ("token_mask", 2.0, 0.6, [[0.0, 0.0, 1.0]], 2 / 2),
        ("sequence_truncate", 2.0, None, [[1.5]], 0.0),  # 3 x 0.5 over the sampled tokens
        ("sequence_truncate", 1.2, None, [[1.2]], 1.0),
        ("sequence_mask", 1.2, None, [[0.0]], 1.0),
    ],
)
def test_importance_weights_truncate_or_mask_per_token_or_sequence(mode, cap, floor, weights, corrected):
    w, stats = importance_weights(OLD, ROLLOUT, SAMPLED, mode, cap, floor)
    assert_close(w, weights)
    assert math.isclose(float(stats["is_corrected_fraction"]), corrected, rel_tol=1e-6)
    assert math.isclose(float(stats["is_ratio_max"]), 3.0 if mode.startswith("token") else 1.5, rel_tol=1e-5)


def test_importance_weights_scale_the_per_token_loss():
    logp = torch.zeros(1, 2, requires_grad=True)  # ratio 1 to the old policy: loss -A per token
    weights = torch.tensor([[2.0, 0.0]])
    value, _ = grpo_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), is_weights=weights)
    value.backward()
    assert math.isclose(float(value), -2.0 / 2, rel_tol=1e-6)
    assert_close(logp.grad, [[-1.0, 0.0]])  # a masked token (weight 0) gives no gradient


def test_overlong_penalty_is_dapo_s_linear_ramp():
    # max 12 tokens, buffer 4: free up to 8, then -1/4 per token, -1 at 12
    assert [overlong_penalty(n, 12, 4) for n in (5, 8, 10, 12)] == [0.0, 0.0, -0.5, -1.0]
    assert overlong_penalty(11, 12, 4, penalty=0.5) == -0.375


def test_kto_on_a_pair_by_hand():
    one = torch.ones(1)
    # log-ratios +1 (chosen), -1 (rejected): z0 = max(0, mean(1, -1)) = 0; both terms 1 - s(beta x 1)
    losses, chosen, rejected = preference_losses("kto", -one, -3 * one, -2 * one, -2 * one, one, one, beta=1.0)
    assert math.isclose(float(losses), 1 - 1 / (1 + math.exp(-1)), rel_tol=1e-6)
    assert (float(chosen), float(rejected)) == (1.0, -1.0)
    # a positive mean log-ratio raises the reference point: log-ratios 3 and 1 -> z0 = 2
    losses, _, _ = preference_losses("kto", one, -one, -2 * one, -2 * one, one, one, beta=1.0)
    s = 1 / (1 + math.exp(-1))
    assert math.isclose(float(losses), ((1 - s) + (1 - s)) / 2, rel_tol=1e-6)


def test_orpo_on_a_pair_by_hand():
    # chosen: 2 tokens of p = 1/2 (average log 1/2, odds 1); rejected: 1 token of p = 1/4 (odds 1/3)
    chosen, rejected = torch.tensor([2 * math.log(0.5)]), torch.tensor([math.log(0.25)])
    lengths = (torch.tensor([2.0]), torch.tensor([1.0]))
    losses, _, _ = preference_losses("orpo", chosen, rejected, None, None, *lengths, beta=0.1)
    # NLL per token log 2, plus -0.1 log s(log 3) = 0.1 log(4/3)
    assert math.isclose(float(losses), math.log(2) + 0.1 * math.log(4 / 3), rel_tol=1e-6)
