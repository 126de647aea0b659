"""MoE in the one Trainer: load statistics checked by hand on a 2-expert toy router, the balance
terms in every objective's step, router replay, and a dense model refusing `train.moe`."""

import math

import pytest
import torch

from tempering.config import MoESettings, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.models.moe import balance_loss, router_z_loss
from tempering.models.routing import RouterTap
from tempering.objectives.sft import SFTObjective
from tempering.tracking.events import read_metrics
from tempering.train.moe import MoEWatch
from tempering.train.trainer import Trainer
from tests.conftest import random_examples, tiny_llama, tiny_moe

# 4 tokens, 2 experts, top-1: the router picks experts 0, 0, 1, 0
TOY_LOGITS = [[2.0, 0.0], [1.0, 0.0], [0.0, 3.0], [0.5, 0.0]]


class ToyTopKRouter(torch.nn.Module):
    """Returns fixed logits and the top-1 expert, in transformers' router contract."""

    num_experts, top_k = 2, 1

    def forward(self, hidden):
        logits = torch.tensor(TOY_LOGITS, requires_grad=True) + 0 * hidden.sum()
        top = torch.softmax(logits, -1).topk(1, dim=-1)
        return logits, top.values, top.indices


class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = ToyTopKRouter()

    def forward(self, x):
        return self.gate(x)


def test_load_statistics_by_hand_on_a_two_expert_router():
    model = ToyModel()
    watch = MoEWatch(model, MoESettings(aux_loss=1.0, z_loss=1.0))
    with watch.tap(None) as tap:
        model(torch.zeros(4, 3))
        term = watch.term(tap)
    stats = watch.stats()
    # shares 3/4 and 1/4; mean 1/2, population std 1/4: CV 1/2; busiest over mean 3/2
    assert stats["moe_layer_share"] == [[0.75, 0.25]]
    assert stats["moe_load_cv"] == pytest.approx(0.5)
    assert stats["moe_load_max_over_mean"] == pytest.approx(1.5)
    p0 = [math.exp(a) / (math.exp(a) + math.exp(b)) for a, b in TOY_LOGITS]
    entropy = sum(-(p * math.log(p) + (1 - p) * math.log(1 - p)) for p in p0) / 4
    assert stats["moe_router_entropy"] == pytest.approx(entropy, rel=1e-5)
    mean_p0 = sum(p0) / 4
    balance = 2 * (0.75 * mean_p0 + 0.25 * (1 - mean_p0))  # E * sum share * mean prob
    z = sum(math.log(math.exp(a) + math.exp(b)) ** 2 for a, b in TOY_LOGITS) / 4
    assert stats["moe_balance_loss"] == pytest.approx(balance, rel=1e-5)
    assert stats["moe_z_loss"] == pytest.approx(z, rel=1e-5)
    assert float(torch.as_tensor(term).detach()) == pytest.approx(balance + z, rel=1e-5)
    logits = torch.tensor(TOY_LOGITS)
    assert float(balance_loss(logits, torch.tensor([[0], [0], [1], [0]]))) == pytest.approx(balance, rel=1e-5)
    assert float(router_z_loss(logits)) == pytest.approx(z, rel=1e-5)


def test_the_balance_gradient_pushes_the_router_toward_the_idle_expert():
    logits = torch.tensor(TOY_LOGITS, requires_grad=True)
    balance_loss(logits, torch.tensor([[0], [0], [1], [0]])).backward()
    assert logits.grad is not None
    assert (logits.grad[:, 0] > 0).all() and (logits.grad[:, 1] < 0).all()  # descent lowers expert 0


def trainer(run_dir, model, moe=None, steps=3):
    s = TrainSettings.model_validate(
        {"steps": steps, "batch_size": 4, "precision": "fp32", "optim": {"lr": 3e-3}, "moe": moe}
    )
    batches = SFTBatches(random_examples(16, seed=3), s.batch_size, 128, 0, True, seed=0)
    return Trainer(model, SFTObjective(), batches, s, run_dir)


def test_every_step_of_an_moe_model_logs_per_layer_load(tmp_path):
    trainer(tmp_path, tiny_moe(), moe={"aux_loss": 0.01, "z_loss": 0.001}).fit()
    records = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert len(records) == 3
    for r in records:
        share = r["moe_layer_share"]
        assert len(share) == 2 and all(len(row) == 4 and sum(row) == pytest.approx(1, abs=1e-4) for row in share)
        assert r["moe_load_cv"] == pytest.approx(sum(r["moe_layer_cv"]) / 2, rel=1e-4)
        assert 0 < r["moe_router_entropy"] < math.log(4)
        assert r["moe_balance_loss"] >= 1.0 and r["moe_z_loss"] > 0
    from tempering.train.loss_plot import plot_moe_load

    assert plot_moe_load(tmp_path / "metrics.jsonl") == tmp_path / "moe_load.png"
    assert (tmp_path / "moe_load.png").stat().st_size > 0


def test_the_balance_term_reaches_the_routers(tmp_path):
    grads = {}
    for aux in (0.0, 10.0):
        t = trainer(tmp_path / str(aux), tiny_moe(), moe={"aux_loss": aux}, steps=1)
        t._forward_backward([t.batches.next_batch()])
        grads[aux] = t.model.model.layers[0].mlp.gate.weight.grad.clone()
    assert not torch.allclose(grads[0.0], grads[10.0])


def test_moe_settings_on_a_dense_model_are_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="train.moe: the model has no expert routers"):
        trainer(tmp_path, tiny_llama(), moe={"aux_loss": 0.01})


def test_replayed_routing_is_used_and_rows_marked_minus_one_keep_their_own():
    model = tiny_moe().eval()
    ids = torch.randint(3, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    with RouterTap(model) as tap, torch.enable_grad():
        natural = model(ids).logits
    chosen = torch.stack([tap.records[layer][0][1] for layer in range(2)], dim=1)  # (rows, layers, k)
    forced = (chosen + 1) % 4
    forced[:5] = -1  # the first sequence keeps its own routing
    with RouterTap(model, replay=[forced]) as tap, torch.enable_grad():
        replayed = model(ids).logits
        with pytest.raises(RuntimeError, match="router replay: a forward pass over 5 tokens"):
            model(ids[:1])
    assert torch.equal(tap.records[0][0][1][5:], forced[5:, 0])
    assert torch.allclose(replayed[0], natural[0], atol=1e-6)
    assert not torch.allclose(replayed[1], natural[1], atol=1e-3)


def test_lora_on_experts_trains_adapters_of_the_expert_tensors(tmp_path):
    from tempering.config import LoraSettings
    from tempering.models.lora import apply_lora

    model = apply_lora(tiny_moe(), LoraSettings(r=4, experts=True), "tiny")
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("mlp.experts" in n and "lora_A" in n for n in trained)
    result = trainer(tmp_path, model, moe={"aux_loss": 0.01}).fit()
    assert result.steps == 3
    with pytest.raises(ValueError, match="lora.experts: the model has no experts"):
        apply_lora(tiny_llama(), LoraSettings(experts=True), "tiny")
