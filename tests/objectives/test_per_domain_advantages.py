"""`per_domain` advantages by hand: each domain whitened on its own, so no domain's reward scale dominates."""

import math

import pytest
import torch

from tempering import algorithms
from tempering.objectives.grpo_math import grpo_advantages


def test_per_domain_whitening_by_hand():
    # domain 0: one group [1, 0]; domain 1: groups [10, 0] and [4, 4] (a reward scale ten times larger)
    rewards = torch.tensor([[1.0, 0.0], [10.0, 0.0], [4.0, 4.0]])
    domains = torch.tensor([0, 1, 1])
    ours = grpo_advantages(rewards, "per_domain", domains=domains)
    # centred on group means: [.5, -.5], [5, -5], [0, 0]
    # domain 0: std .5 -> [1, -1]; domain 1: std sqrt((25 + 25) / 4) = sqrt(12.5) -> [+-5 / 3.5355, 0, 0]
    s = math.sqrt(12.5)
    assert ours.flatten().tolist() == pytest.approx([1.0, -1.0, 5 / s, -5 / s, 0.0, 0.0], abs=1e-5)
    # one global normalisation: std over all six centred values sqrt(50.5 / 6); domain 0 shrinks to +-0.17
    glob = grpo_advantages(rewards, "reinforce_pp_baseline")
    g = math.sqrt(50.5 / 6)
    assert glob[0].tolist() == pytest.approx([0.5 / g, -0.5 / g], abs=1e-5)
    assert float(glob[0, 0]) < 0.2 and float(ours[0, 0]) == pytest.approx(1.0, abs=1e-5)


def test_one_domain_is_reinforce_pp_baseline_and_groups_of_any_order_agree():
    rewards = torch.tensor([0.0, 1.0, 1.0, 3.0, 0.5, 0.5])
    groups = torch.tensor([1, 0, 1, 0, 2, 2])
    one = grpo_advantages(rewards, "per_domain", groups=groups)
    assert torch.allclose(one, grpo_advantages(rewards, "reinforce_pp_baseline", groups=groups), atol=1e-6)
    domains = torch.tensor([1, 0, 1, 0, 0, 0])  # groups 0 and 2 in domain 0, group 1 in domain 1
    split = grpo_advantages(rewards, "per_domain", groups=groups, domains=domains)
    # domain 1: group 1 [0, 1] -> centred [-.5, .5], std .5 -> [-1, 1]
    assert split[[0, 2]].tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)
    # domain 0: group 0 [1, 3] -> [-1, 1], group 2 ties -> [0, 0]; std sqrt(2 / 4)
    assert split[[1, 3, 4, 5]].tolist() == pytest.approx([-math.sqrt(2), math.sqrt(2), 0, 0], abs=1e-5)


def test_step_rewards_carry_each_rows_domain():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [10.0, 0.0], [0.0, 0.0]])
    step_mask = torch.tensor([[1, 0], [1, 0], [1, 0], [1, 0]])
    groups, domains = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1])
    adv = grpo_advantages(rewards, "per_domain", groups=groups, step_mask=step_mask, domains=domains)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)


def test_per_domain_is_registered_as_domain_aware():
    assert algorithms.lookup("advantage", "per_domain").options["domains"] is True
    assert algorithms.lookup("advantage", "grpo").options["domains"] is False
