"""Preference losses: hand-derived values, and parity with TRL (loss and gradient within 1e-6).

TRL is the oracle on identical log-prob tensors: `DPOTrainer._compute_loss` (sigmoid DPO,
IPO, the SFT term) runs its real code on a stand-in model that returns given per-token
log-probs, and `CPOTrainer.cpo_loss` (the sigmoid loss with label smoothing = cDPO, and
SimPO) on given sequence log-probs. Gradients are taken with respect to the same leaf
tensors in both.
"""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from tempering.objectives.preference import dpo_loss, ipo_loss, preference_losses, sft_term, simpo_loss

trl_dpo = pytest.importorskip("trl.trainer.dpo_trainer")
trl_cpo = pytest.importorskip("trl.experimental.cpo.cpo_trainer")

B, T = 4, 9


def per_token_batch(seed: int, equal_lengths: bool = False):
    """Per-token log-probs (2B, T-1) for [chosen; rejected] rows, 0 outside each answer, and
    TRL's (unshifted) completion mask (2B, T); row lengths differ unless `equal_lengths`."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(2 * B, T, dtype=torch.long)
    for r in range(2 * B):
        n = 5 if equal_lengths else 2 + (r * 3) % 6
        mask[r, T - n :] = 1
    logp = -torch.rand(2 * B, T - 1, generator=gen, dtype=torch.float64) * 3 * mask[:, 1:]
    ref = -torch.rand(2 * B, T - 1, generator=gen, dtype=torch.float64) * 3 * mask[:, 1:]
    return logp, ref, mask


def trl_dpo_loss(logp, ref_sums, mask, loss_types, beta, loss_weights=None):
    """TRL's DPO loss, from its own `_compute_loss`, on given per-token log-probs."""
    n = logp.shape[0]
    outputs = SimpleNamespace(
        log_probs=logp,
        entropy=torch.zeros_like(logp),
        mean_logits=torch.zeros_like(logp),
        is_top1=torch.zeros_like(logp, dtype=torch.bool),
    )
    accel = SimpleNamespace(device=torch.device("cpu"), gather=lambda x: x, gather_for_metrics=lambda x: x)
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=accel,
        aux_loss_enabled=False,
        ld_alpha=None,
        precompute_ref_logps=True,
        f_divergence_type="reverse_kl",
        loss_types=loss_types,
        loss_weights=loss_weights or [1.0] * len(loss_types),
        beta=beta,
        label_smoothing=0.0,
        use_weighting=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros_like(mask),
        "attention_mask": torch.ones_like(mask),
        "completion_mask": mask,
        "ref_chosen_logps": ref_sums[: n // 2],
        "ref_rejected_logps": ref_sums[n // 2 :],
    }
    return trl_dpo.DPOTrainer._compute_loss(stub, lambda **kw: outputs, inputs, False)


def trl_cpo_loss(chosen, rejected, loss_type, beta, label_smoothing=0.0, gamma=0.0):
    stub = SimpleNamespace(
        alpha=0.0,
        beta=beta,
        loss_type=loss_type,
        simpo_gamma=gamma,
        label_smoothing=label_smoothing,
        accelerator=SimpleNamespace(device=torch.device("cpu")),
    )
    losses, _, _ = trl_cpo.CPOTrainer.cpo_loss(stub, chosen, rejected)
    return losses.mean()


def ours(loss_type, logp, ref, mask, **kw):
    """Our loss (mean over pairs) from the same per-token tensors."""
    scored = mask[:, 1:].to(logp.dtype)  # as head_logprobs: nothing flows from unscored positions
    sums, lens = (logp * scored).sum(1), scored.sum(1)
    ref_sums = ref.sum(1)
    losses, _, _ = preference_losses(
        loss_type, sums[:B], sums[B:], ref_sums[:B], ref_sums[B:], lens[:B], lens[B:], **kw
    )
    return losses.mean()


def grads_match(a, b, leaf, mask):
    """Gradients agree on every scored position (elsewhere both pipelines hold constant zeros:
    TRL's fused head and our `head_logprobs` give no path to unscored tokens)."""
    (ga,) = torch.autograd.grad(a, leaf)
    (gb,) = torch.autograd.grad(b, leaf)
    scored = mask[:, 1:].bool()
    assert (ga - gb)[scored].abs().max().item() < 1e-6
    assert ga.abs().sum() > 0  # a gradient that is there, not two zeros


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "loss_type,trl_type,beta",
    [("dpo", "sigmoid", 0.1), ("dpo", "sigmoid", 2.0), ("ipo", "ipo", 0.1), ("ipo", "ipo", 0.5)],
)
def test_dpo_and_ipo_match_trl(loss_type, trl_type, beta, dtype):
    for seed in range(3):
        logp, ref, mask = per_token_batch(seed)
        logp, ref = logp.to(dtype).requires_grad_(), ref.to(dtype)
        theirs = trl_dpo_loss(logp, ref.sum(1), mask, [trl_type], beta)
        mine = ours(loss_type, logp, ref, mask, beta=beta)
        assert abs(mine.item() - theirs.item()) < 1e-6
        grads_match(mine, theirs, logp, mask)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_cdpo_label_smoothing_matches_trl_sigmoid_with_smoothing(eps):
    logp, ref, mask = per_token_batch(5)
    logp = logp.requires_grad_()
    sums, ref_sums = logp.sum(1), ref.sum(1)
    # TRL's smoothed sigmoid (CPO) on logits = chosen - rejected: feed it the log-ratios
    theirs = trl_cpo_loss(sums[:B] - ref_sums[:B], sums[B:] - ref_sums[B:], "sigmoid", 0.3, eps)
    mine = ours("dpo", logp, ref, mask, beta=0.3, label_smoothing=eps)
    assert abs(mine.item() - theirs.item()) < 1e-6
    grads_match(mine, theirs, logp, mask)


@pytest.mark.parametrize("beta,gamma,eps", [(2.0, 0.5, 0.0), (2.5, 1.4, 0.0), (2.0, 0.5, 0.1)])
def test_simpo_matches_trl(beta, gamma, eps):
    logp, ref, mask = per_token_batch(7)
    logp = logp.requires_grad_()
    sums, lens = logp.sum(1), mask[:, 1:].sum(1).to(logp.dtype)
    # CPOTrainer feeds SimPO length-averaged log-probs (average_log_prob=True)
    theirs = trl_cpo_loss(sums[:B] / lens[:B], sums[B:] / lens[B:], "simpo", beta, eps, gamma)
    mine = ours("simpo", logp, ref, mask, beta=beta, gamma=gamma, label_smoothing=eps)
    assert abs(mine.item() - theirs.item()) < 1e-6
    grads_match(mine, theirs, logp, mask)


def test_sft_term_matches_trl_sft_loss_on_equal_lengths():
    # TRL's "sft" averages over all chosen tokens of the batch; ours per answer: equal when lengths are
    logp, ref, mask = per_token_batch(3, equal_lengths=True)
    logp = logp.requires_grad_()
    theirs = trl_dpo_loss(logp, ref.sum(1), mask, ["sigmoid", "sft"], 0.1, [1.0, 0.7])
    mine = ours("dpo", logp, ref, mask, beta=0.1, sft_weight=0.7)
    assert abs(mine.item() - theirs.item()) < 1e-6
    grads_match(mine, theirs, logp, mask)


def test_hand_derived_values():
    one = torch.tensor([1.0])
    # d = (-1 - -2) - (-3 - -2) = 2; beta 0.5 -> -log sigmoid(1)
    loss = dpo_loss(-one, -3 * one, -2 * one, -2 * one, beta=0.5)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1.0)))
    smoothed = dpo_loss(-one, -3 * one, -2 * one, -2 * one, beta=0.5, label_smoothing=0.25)
    assert smoothed.item() == pytest.approx(0.75 * math.log1p(math.exp(-1)) + 0.25 * math.log1p(math.exp(1)))
    # IPO: per-token ratios 1/2 - (-1)/1 = 1.5; tau 0.25 -> (1.5 - 2)^2
    assert ipo_loss(-one, -3 * one, -2 * one, -2 * one, 2 * one, one, beta=0.25).item() == pytest.approx(0.25)
    # SimPO: beta (-4/4 - -6/2) - gamma = 2 * 2 - 1 = 3 -> -log sigmoid(3)
    assert simpo_loss(-4 * one, -6 * one, 4 * one, 2 * one, beta=2.0, gamma=1.0).item() == pytest.approx(
        math.log1p(math.exp(-3.0))
    )
    assert sft_term(-6 * one, 3 * one).item() == pytest.approx(2.0)


def test_reference_based_loss_without_reference_is_an_error():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="needs reference log-probs"):
        preference_losses("dpo", x, x, None, None, x + 1, x + 1, beta=0.1)
    losses, chosen, rejected = preference_losses("simpo", x - 1, x - 2, None, None, x + 1, x + 1, beta=2.0, gamma=0.5)
    assert losses.shape == (2,) and (chosen > rejected).all()
