"""On-policy distillation's divergences between next-token distributions: by hand on a two-token
vocabulary, and against TRL's `GKDTrainer.generalized_jsd_loss` on identical tensors (loss and
gradient)."""

import math

import pytest
import torch

from tempering import algorithms
from tempering.objectives.divergences import forward_kl, generalized_jsd, reverse_kl


def two_tokens() -> tuple[torch.Tensor, torch.Tensor]:
    """student p = (1/2, 1/2), teacher q = (1/4, 3/4), as (1, 2) log-probs."""
    return torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.25, 0.75]]).log()


def test_the_divergences_by_hand():
    s, t = two_tokens()
    assert float(reverse_kl(s, t)) == pytest.approx(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75))
    assert float(forward_kl(s, t)) == pytest.approx(0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5))
    m = (0.5 * 0.25 + 0.5 * 0.5, 0.5 * 0.75 + 0.5 * 0.5)  # the mixture at beta 1/2: (3/8, 5/8)
    kl_t = 0.25 * math.log(0.25 / m[0]) + 0.75 * math.log(0.75 / m[1])
    kl_s = 0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1])
    assert float(generalized_jsd(s, t, beta=0.5)) == pytest.approx(0.5 * kl_t + 0.5 * kl_s)
    assert float(generalized_jsd(s, t, beta=0.0)) == float(forward_kl(s, t))
    assert float(generalized_jsd(s, t, beta=1.0)) == float(reverse_kl(s, t))
    assert float(reverse_kl(t, t)) == 0.0


def test_the_divergences_are_registered():
    algorithms.load()
    assert {"forward_kl", "jsd", "reverse_kl"} <= set(algorithms.names("divergence"))
    assert algorithms.lookup("divergence", "jsd").fn is generalized_jsd


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_parity_with_trl_generalized_jsd(beta):
    gkd = pytest.importorskip("trl.experimental.gkd.gkd_trainer")
    gen = torch.Generator().manual_seed(0)
    student = (torch.randn(6, 50, generator=gen, dtype=torch.float64) * 3).requires_grad_()
    teacher = torch.randn(6, 50, generator=gen, dtype=torch.float64) * 3
    ours = generalized_jsd(torch.log_softmax(student, -1), torch.log_softmax(teacher, -1), beta=beta).sum()
    (g_ours,) = torch.autograd.grad(ours, student)
    theirs = gkd.GKDTrainer.generalized_jsd_loss(student, teacher, beta=beta, reduction="sum")
    (g_theirs,) = torch.autograd.grad(theirs, student)
    assert abs(float(ours - theirs)) <= 1e-6
    assert float((g_ours - g_theirs).abs().max()) <= 1e-6
