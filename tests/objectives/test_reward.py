"""Bradley-Terry loss: hand-derived values and gradients."""

import math

import torch

from tempering.objectives.reward import RewardObjective, bradley_terry_loss_sum, pair_stats


def softplus(x: float) -> float:  # -log sigmoid(-x)
    return math.log1p(math.exp(x))


def test_loss_is_the_sum_of_minus_log_sigmoid_of_the_score_difference():
    chosen, rejected = torch.tensor([1.0, 0.0, -2.0]), torch.tensor([0.0, 0.0, 1.0])
    got = bradley_terry_loss_sum(chosen, rejected)
    # -log sigmoid(d) = log(1 + e^-d): d = 1, 0, -3
    want = softplus(-1.0) + math.log(2.0) + softplus(3.0)
    assert abs(float(got) - want) < 1e-6


def test_margin_and_weight():
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0])
    got = bradley_terry_loss_sum(chosen, rejected, margin=torch.tensor([1.0, 1.0]), weight=torch.tensor([2.0, 0.5]))
    want = 2.0 * math.log(2.0) + 0.5 * softplus(1.0)  # d - m = 0 and -1
    assert abs(float(got) - want) < 1e-6
    assert abs(float(bradley_terry_loss_sum(chosen, rejected, weight=0.0))) < 1e-12


def test_gradient_is_minus_sigmoid_of_minus_difference():
    chosen = torch.tensor([1.0, -0.5], requires_grad=True)
    rejected = torch.tensor([0.0, 0.5], requires_grad=True)
    bradley_terry_loss_sum(chosen, rejected).backward()
    sig = lambda x: 1 / (1 + math.exp(-x))
    want = [-sig(-1.0), -sig(1.0)]
    assert torch.allclose(chosen.grad, torch.tensor(want), atol=1e-6)
    assert torch.allclose(rejected.grad, -torch.tensor(want), atol=1e-6)


def test_centring_term_adds_squared_sum():
    chosen, rejected = torch.tensor([2.0]), torch.tensor([1.0])
    got = bradley_terry_loss_sum(chosen, rejected, center_coef=0.1)
    assert abs(float(got) - (softplus(-1.0) + 0.1 * 9.0)) < 1e-6


def test_pair_stats_count_ties_half():
    stats = pair_stats(torch.tensor([1.0, 0.0, 0.0, 2.0]), torch.tensor([0.0, 0.0, 1.0, 1.0]))
    assert stats["accuracy"] == 0.625  # (1 + 0.5 + 0 + 1) / 4
    assert abs(stats["margin"] - 0.25) < 1e-9


class ScoreTable(torch.nn.Module):
    """A 'model' whose score is a learnable value per first token id: checks the wiring."""

    def __init__(self):
        super().__init__()
        self.values = torch.nn.Parameter(torch.tensor([0.0, 1.0, 3.0]))

    def forward(self, input_ids, attention_mask):
        return self.values[input_ids[:, 0]]


def test_objective_splits_chosen_first_then_rejected():
    batch = {
        "input_ids": torch.tensor([[2], [1], [0], [2]]),
        "attention_mask": torch.ones(4, 1),
        "weight": torch.tensor([1.0, 1.0]),
        "margin": torch.tensor([0.0, 0.0]),
    }
    objective = RewardObjective()
    loss, stats = objective.loss(ScoreTable(), batch)
    assert objective.units(batch) == 2
    want = softplus(-3.0) + softplus(2.0)  # pairs (3 vs 0) and (1 vs 3)
    assert abs(float(loss) - want) < 1e-6
    assert stats["accuracy"] == 0.5


def test_shared_prompt_layout_gives_the_same_loss_as_full_rows():
    from tempering.data.padding import left_pad, right_pad
    from tempering.models.reward import RewardModel
    from tests.conftest import tiny_llama

    rm = RewardModel(tiny_llama(seed=6))
    prompts, chosen, rejected = [[5, 6, 7], [8]], [[9, 2], [10, 11, 2]], [[12, 2], [13, 2]]
    p_ids, p_mask = left_pad(prompts, 2)
    c_ids, c_mask = right_pad([chosen[0], rejected[0], chosen[1], rejected[1]], 2)
    grouped = {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask}
    ids, mask = right_pad([p + c for p, c in zip(prompts, chosen)] + [p + r for p, r in zip(prompts, rejected)], 2)
    full = {"input_ids": ids, "attention_mask": mask}
    objective = RewardObjective()
    assert objective.units(grouped) == objective.units(full) == 2
    assert abs(float(objective.loss(rm, grouped)[0]) - float(objective.loss(rm, full)[0])) < 1e-5
