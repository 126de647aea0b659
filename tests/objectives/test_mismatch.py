"""The train-vs-rollout mismatch figures, checked by hand."""

import math

import torch

from tempering.objectives.mismatch import mismatch_stats


def test_mismatch_figures_by_hand():
    train = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, 0.0]])
    rollout = torch.tensor([[-1.1, -2.0, -2.5], [-0.5, 0.0, 0.0]])
    sampled = torch.tensor([[1, 1, 1], [1, 0, 0]])  # row 1's last two tokens were not sampled
    s = mismatch_stats(train, rollout, sampled)
    gaps = [0.1, 0.0, 0.5, 0.0]
    assert math.isclose(float(s["logprob_mismatch"]), sum(gaps) / 4, rel_tol=1e-6)
    # p99 of 4 values, linear interpolation: sorted [0, 0, 0.1, 0.5] at position 0.99 * 3 = 2.97
    assert math.isclose(float(s["logprob_mismatch_p99"]), 0.1 + 0.97 * 0.4, rel_tol=1e-5)
    diffs = [0.1, 0.0, -0.5, 0.0]  # log p_train - log p_rollout
    kl = sum(math.exp(d) - 1 - d for d in diffs) / 4
    assert math.isclose(float(s["mismatch_kl"]), kl, rel_tol=1e-5)


def test_no_sampled_token_gives_zeros_and_no_gradient_flows():
    train = torch.zeros(2, 3, requires_grad=True)
    s = mismatch_stats(train, torch.ones(2, 3), torch.zeros(2, 3))
    assert all(float(v) == 0.0 for v in s.values())
    s = mismatch_stats(train, torch.ones(2, 3), torch.ones(2, 3))
    assert not any(v.requires_grad for v in s.values())
