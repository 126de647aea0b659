"""SFT loss: hand-derived numbers, and agreement with Hugging Face's own loss."""

import math

import torch

from tempering.data.render import IGNORE
from tempering.objectives.sft import SFTObjective, count_targets, masked_nll_sum
from tests.conftest import tiny_llama


def test_masked_nll_sum_hand_derived():
    # Vocabulary of 2 with an identity head: logits are the hidden states themselves.
    head = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.eye(2))
    hidden = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, 5.0]]])  # (1, 3, 2)
    labels = torch.tensor([[IGNORE, 0, 1]])
    # position 0 predicts label 0 with uniform logits: -log(1/2)
    # position 1 predicts label 1 with logits (log 3, 0): p(1) = 1/4 -> -log(1/4)
    # position 2 has no next label
    loss, n = masked_nll_sum(hidden, head, labels)
    assert int(n) == 2
    assert math.isclose(float(loss), math.log(2) + math.log(4), rel_tol=1e-6)


def test_masked_nll_sum_ignores_masked_positions():
    head = torch.nn.Linear(2, 2, bias=False)
    hidden = torch.randn(1, 4, 2)
    loss, n = masked_nll_sum(hidden, head, torch.tensor([[5, IGNORE, IGNORE, IGNORE]]))
    assert int(n) == 0 and float(loss) == 0.0


def test_sft_objective_matches_hf_loss_on_full_logits():
    model = tiny_llama()
    ids = torch.randint(3, 64, (2, 12))
    labels = ids.clone()
    labels[:, :5] = IGNORE
    batch = {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids)}
    loss_sum, _ = SFTObjective().loss(model, batch)
    hf = model(input_ids=ids, labels=labels).loss  # HF: mean over shifted non-ignored labels
    assert torch.allclose(loss_sum / count_targets(batch), hf, atol=1e-5)
