"""Parity with TRL on identical tensors (loss and gradient within 1e-6) for every loss both implement.

TRL is the oracle, its own code run on given log-probs through stand-in objects:
  * `GRPOTrainer._compute_loss` for loss_type grpo, dapo, dr_grpo, bnpo, cispo, and grpo with
    `importance_sampling_level="sequence"` (our gspo); with and without the k3 KL term, and with
    the vLLM importance-sampling correction (our TIS / MIS weights fed as its ratio);
  * `KTOTrainer._compute_loss` (loss_type kto) on a pair batch laid out as B desirable and B
    undesirable rows, its KL rows scoring the batch's own answers (our reference point);
  * `ORPOTrainer.odds_ratio_loss` for ORPO's odds-ratio term.
(DPO, IPO, cDPO, SimPO and the SFT term: tests/objectives/test_preference.py.)

Name map: TRL's CISPO cap `epsilon_high` is our 1 + clip_high.
"""

from collections import defaultdict
from functools import partial
from types import SimpleNamespace

import pytest
import torch

from tempering.objectives.grpo_math import grpo_loss
from tempering.objectives.off_policy import importance_weights
from tempering.objectives.preference import odds_ratio_term, preference_losses

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
trl_kto = pytest.importorskip("trl.trainer.kto_trainer")
trl_orpo = pytest.importorskip("trl.experimental.orpo.orpo_trainer")

B, T, MAX_TOKENS = 6, 7, 9
ACCELERATOR = SimpleNamespace(
    device=torch.device("cpu"),
    num_processes=1,
    gather=lambda x: x,
    gather_for_metrics=lambda x: x,
    reduce=lambda x, reduction="sum": x,
)


def rollout_tensors(seed: int, dtype=torch.float64):
    """logp (leaf), old, ref, engine log-probs (B, T), advantages (B,), right-padded mask (B, T)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, T, dtype=torch.long)
    for r in range(B):
        mask[r, : 2 + (r * 3) % (T - 1)] = 1

    def rand(scale):
        return torch.randn(B, T, generator=gen, dtype=dtype) * scale

    logp = -torch.rand(B, T, generator=gen, dtype=dtype) * 3
    old, ref, engine = logp + rand(0.3), logp + rand(0.2), logp + rand(0.4)
    adv = torch.randn(B, generator=gen, dtype=dtype)
    return logp.requires_grad_(), old, ref, engine, adv, mask


def trl_grpo_loss(
    logp, old, adv, mask, loss_type, clip_low, clip_high, level="token", ref=None, beta=0.0, is_ratio=None
):
    """TRL's GRPO loss from its own `_compute_loss` on given per-token log-probs."""
    stub = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **kw: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=clip_low,
        epsilon_high=clip_high,
        use_vllm=is_ratio is not None,
        vllm_importance_sampling_correction=is_ratio is not None,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_TOKENS,
        accelerator=ACCELERATOR,
        _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    ids = torch.zeros(B, T, dtype=torch.long)
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": ids,
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    return trl_grpo.GRPOTrainer._compute_loss(stub, None, inputs)


def assert_loss_and_grad_match(ours: torch.Tensor, theirs: torch.Tensor, leaf: torch.Tensor) -> None:
    assert abs(ours.item() - theirs.item()) <= 1e-6, (ours.item(), theirs.item())
    (g_ours,) = torch.autograd.grad(ours, leaf, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, leaf, retain_graph=True)
    assert (g_ours - g_theirs).abs().max().item() <= 1e-6
    assert g_ours.abs().sum() > 0  # a gradient that is there, not two zeros


# (our loss, TRL loss_type, TRL importance_sampling_level, clip_low, clip_high, TRL's epsilon_high)
GRPO_FAMILY = [
    ("grpo", "grpo", "token", 0.2, 0.2, 0.2),
    ("dapo", "dapo", "token", 0.2, 0.28, 0.28),
    ("dr_grpo", "dr_grpo", "token", 0.2, 0.28, 0.28),
    ("bnpo", "bnpo", "token", 0.2, 0.28, 0.28),
    ("gspo", "grpo", "sequence", 3e-4, 4e-4, 4e-4),
    ("gspo", "grpo", "sequence", 0.05, 0.1, 0.1),
    ("cispo", "cispo", "token", 0.2, 0.1, 1.1),
    ("cispo", "cispo", "token", 0.2, 4.0, 5.0),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("loss,loss_type,level,clip_low,clip_high,trl_high", GRPO_FAMILY)
def test_grpo_family_matches_trl(loss, loss_type, level, clip_low, clip_high, trl_high, dtype):
    for seed in range(3):
        logp, old, _, _, adv, mask = rollout_tensors(seed, dtype)
        theirs = trl_grpo_loss(logp, old, adv, mask, loss_type, clip_low, trl_high, level)
        ours, stats = grpo_loss(logp, old, adv, mask, clip_low, clip_high, max_tokens=MAX_TOKENS, loss=loss)
        assert_loss_and_grad_match(ours, theirs, logp)
    assert stats["clip_fraction"] > 0 or loss == "gspo" or clip_high >= 1  # the clipping rules were exercised


@pytest.mark.parametrize(
    "loss,loss_type,level", [("dapo", "dapo", "token"), ("grpo", "grpo", "token"), ("gspo", "grpo", "sequence")]
)
def test_kl_term_matches_trl(loss, loss_type, level):
    logp, old, ref, _, adv, mask = rollout_tensors(7)
    theirs = trl_grpo_loss(logp, old, adv, mask, loss_type, 0.2, 0.28, level, ref=ref, beta=0.04)
    ours, _ = grpo_loss(logp, old, adv, mask, 0.2, 0.28, max_tokens=MAX_TOKENS, logp_ref=ref, beta=0.04, loss=loss)
    assert_loss_and_grad_match(ours, theirs, logp)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
@pytest.mark.parametrize("loss,loss_type", [("dapo", "dapo"), ("grpo", "grpo"), ("cispo", "cispo")])
def test_importance_sampling_correction_matches_trl(mode, loss, loss_type):
    logp, old, _, engine, adv, mask = rollout_tensors(11)
    cap = 1.5 if mode.startswith("token") else 3.0
    weights, stats = importance_weights(old, engine, mask, mode, cap, floor=0.5)
    assert 0 < stats["is_corrected_fraction"] < 1  # both kept and corrected tokens or sequences
    high = 1.28 if loss == "cispo" else 0.28
    theirs = trl_grpo_loss(logp, old, adv, mask, loss_type, 0.2, high, is_ratio=weights)
    ours, _ = grpo_loss(logp, old, adv, mask, 0.2, 0.28, max_tokens=MAX_TOKENS, loss=loss, is_weights=weights)
    assert_loss_and_grad_match(ours, theirs, logp)


def trl_kto_loss(chosen_tok, rejected_tok, ref_chosen, ref_rejected, mask, beta):
    """TRL's KTO loss from its own `_compute_loss`: rows [chosen; rejected], KL rows = the same answers."""
    n = chosen_tok.shape[0] * 2
    tokens = torch.cat([chosen_tok, rejected_tok])  # (2B, L - 1) per-token log-probs, 0 off the answer
    zeros = torch.zeros_like(tokens)
    outputs = SimpleNamespace(log_probs=tokens, entropy=zeros, mean_logits=zeros)
    kl_outputs = SimpleNamespace(log_probs=tokens.detach(), entropy=zeros, mean_logits=zeros)
    ids, kl_ids = torch.zeros_like(mask), torch.ones_like(mask)

    def model(**kw):
        return kl_outputs if kw["input_ids"] is kl_ids else outputs

    stub = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=ACCELERATOR,
        calculate_KL=True,
        precompute_ref_logps=True,
        aux_loss_enabled=False,
        loss_type="kto",
        beta=beta,
        desirable_weight=1.0,
        undesirable_weight=1.0,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    stub._compute_kl_logps = partial(trl_kto.KTOTrainer._compute_kl_logps, stub)
    ref = torch.cat([ref_chosen, ref_rejected])
    batch = {
        "label": torch.tensor([True] * (n // 2) + [False] * (n // 2)),
        "input_ids": ids,
        "attention_mask": torch.ones_like(mask),
        "completion_mask": mask,
        "KL_input_ids": kl_ids,
        "KL_attention_mask": torch.ones_like(mask),
        "KL_completion_mask": mask,
        "ref_logps": ref,
        "ref_KL_logps": ref,
    }
    return trl_kto.KTOTrainer._compute_loss(stub, model, batch, False)


@pytest.mark.parametrize("shift", [0.0, 1.5])  # 1.5: the policy ahead of the reference, so z0 > 0
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_kto_matches_trl(shift, beta):
    gen = torch.Generator().manual_seed(3)
    pairs, length = 4, 6
    mask = torch.zeros(2 * pairs, length, dtype=torch.long)
    mask[:, 2:] = 1
    per_token = (-torch.rand(2 * pairs, length - 1, generator=gen, dtype=torch.float64) * 2) * mask[:, 1:]
    per_token.requires_grad_()
    sums = per_token.sum(1)
    ref = sums.detach() - shift + torch.randn(2 * pairs, generator=gen, dtype=torch.float64)
    theirs = trl_kto_loss(per_token[:pairs], per_token[pairs:], ref[:pairs], ref[pairs:], mask, beta)
    lens = mask[:, 1:].sum(1).to(torch.float64)
    losses, _, _ = preference_losses(
        "kto", sums[:pairs], sums[pairs:], ref[:pairs], ref[pairs:], lens[:pairs], lens[pairs:], beta=beta
    )
    assert_loss_and_grad_match(losses.mean(), theirs, per_token)


def test_orpo_odds_ratio_matches_trl():
    gen = torch.Generator().manual_seed(5)
    chosen = (-torch.rand(8, generator=gen, dtype=torch.float64) * 3 - 0.01).requires_grad_()
    rejected = (-torch.rand(8, generator=gen, dtype=torch.float64) * 3 - 0.01).requires_grad_()
    stub = SimpleNamespace(beta=0.1, accelerator=ACCELERATOR)
    trl_losses, *_ = trl_orpo.ORPOTrainer.odds_ratio_loss(stub, chosen, rejected)
    theirs = -trl_losses.mean()  # TRL: loss = nll - losses.mean()
    ours = odds_ratio_term(chosen, rejected, 0.1).mean()
    assert_loss_and_grad_match(ours, theirs, chosen)
    assert_loss_and_grad_match(ours, theirs, rejected)
