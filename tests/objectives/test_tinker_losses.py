"""The Tinker API's built-in losses on hand-derived numbers (sums over positions, never means)."""

from __future__ import annotations

import math

import pytest
import torch

from tempering.objectives.tinker_losses import tinker_loss


def test_cross_entropy_is_the_weighted_sum_of_negative_log_probs():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    loss = tinker_loss("cross_entropy", logp, {"weights": torch.tensor([0.0, 1.0, 2.0])}, {})
    assert float(loss) == pytest.approx(2.0 + 1.0)


def test_importance_sampling_weights_advantages_by_the_unclipped_ratio():
    # ratios e^0.5, 1, e^-1; advantages 1, -2, 3: -(1.6487 - 2 + 1.1036) = -0.7523
    logp = torch.tensor([-1.0, -1.0, -2.0])
    inputs = {"logprobs": torch.tensor([-1.5, -1.0, -1.0]), "advantages": torch.tensor([1.0, -2.0, 3.0])}
    expected = -(math.exp(0.5) * 1 - 2 + math.exp(-1) * 3)
    assert float(tinker_loss("importance_sampling", logp, inputs, {})) == pytest.approx(expected)


def test_ppo_clips_the_ratio_to_its_thresholds_pessimistically():
    # ratio e^0.5 = 1.65: with A = +1 the clipped 1.2 counts (min), with A = -1 the unclipped -1.65
    logp = torch.tensor([0.0, 0.0])
    inputs = {"logprobs": torch.tensor([-0.5, -0.5]), "advantages": torch.tensor([1.0, -1.0])}
    assert float(tinker_loss("ppo", logp, inputs, {})) == pytest.approx(-1.2 + math.exp(0.5))
    # thresholds from the request: [0.5, 1.5] clips A = +1 at 1.5
    loose = tinker_loss("ppo", logp, inputs, {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5})
    assert float(loose) == pytest.approx(-1.5 + math.exp(0.5))


def test_the_gradient_of_importance_sampling_is_ratio_times_advantage():
    logp = torch.tensor([-1.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-1.0]), "advantages": torch.tensor([2.0])}
    tinker_loss("importance_sampling", logp, inputs, {}).backward()
    assert logp.grad is not None and float(logp.grad[0]) == pytest.approx(-2.0)  # d(-r*A)/dlogp = -r*A, r = 1
