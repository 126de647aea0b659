"""The Tinker service trains with the Trainer's pieces: its save_state is a Trainer checkpoint (the
Trainer's loader reads it, and a Trainer checkpoint of the same LoRA loads into a Tinker model, weights
and optimizer state exact), its optimizer is the Trainer's with the request's AdamW settings, and its
train_attn / train_mlp / train_unembed pick layers through the LoRA config's own target selection."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from tempering.config import LoraSettings, TrainSettings
from tempering.models.load import load_model
from tempering.models.lora import ALL_LINEAR, apply_lora, linear_targets
from tempering.objectives.sft import SFTObjective
from tempering.serve.tinker_ops import UserError, create_trainee, load_state, optim_step, save_state
from tempering.train.checkpoint import load_checkpoint
from tempering.train.trainer import Trainer
from tests.conftest import tiny_llama
from tests.serve.conftest import tiny_tokenizer

PARTS = {"train_attn": True, "train_mlp": True, "train_unembed": False}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tokenizer = tiny_tokenizer()
    out = tmp_path_factory.mktemp("base")
    tiny_llama(vocab=len(tokenizer)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def trained(base: str, steps: int = 2):
    """A Tinker training model after `steps` optimizer steps (non-zero weights and Adam moments)."""
    trainee = create_trainee("m", base, 4, 0, PARTS, "fp32")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    for _ in range(steps):
        trainee.model(input_ids=ids).logits.pow(2).mean().backward()
        optim_step(trainee, 1e-2, (0.9, 0.95), 1e-8, 0.0, 1.0)
    return trainee


def trainer_of(base: str, run_dir) -> Trainer:
    """A Trainer over the same base with LoRA of the same rank on every linear layer of the blocks."""
    model = apply_lora(load_model(base), LoraSettings.model_validate({"r": 4, "alpha": 32}), base)
    settings = TrainSettings.model_validate({"steps": 1, "precision": "fp32"})
    no_data = SimpleNamespace(state_dict=dict)  # the checkpoint's data position: none here
    return Trainer(model, SFTObjective(), no_data, settings, run_dir)  # type: ignore[arg-type]


def trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def same_optimizer_state(a: dict, b: dict) -> bool:
    if a["param_groups"] != b["param_groups"] or a["state"].keys() != b["state"].keys():
        return False
    return all(torch.equal(a["state"][i][k], b["state"][i][k]) for i in a["state"] for k in a["state"][i])


def test_a_tinker_save_state_is_read_by_the_trainers_checkpoint_loader_and_restore(base, tmp_path):
    trainee = trained(base)
    out = save_state(trainee, tmp_path / "weights" / "s1")
    ckpt = load_checkpoint(out)  # the manifest verifies: weights, optimizer, rng, state
    assert ckpt["state"]["step"] == 2 and ckpt["state"]["tinker"]["rank"] == 4
    expected = trainable(trainee.model)
    assert ckpt["weights"].keys() == expected.keys()
    assert all(torch.equal(ckpt["weights"][n], t) for n, t in expected.items())
    assert same_optimizer_state(ckpt["optimizer"], trainee.optimizer.state_dict())

    trainer = trainer_of(base, tmp_path / "run")
    state = trainer._restore(out, full=False)  # the Trainer's own restore (as a rollback reads one)
    assert state["step"] == 2 and trainer.step == 2
    assert all(torch.equal(t, expected[n]) for n, t in trainable(trainer.model).items())
    assert same_optimizer_state(trainer.optimizer.state_dict(), trainee.optimizer.state_dict())


def test_a_trainer_checkpoint_loads_into_a_tinker_model_with_its_optimizer(base, tmp_path):
    trainer = trainer_of(base, tmp_path / "run")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    trainer.model(input_ids=ids).logits.pow(2).mean().backward()
    trainer.optimizer.step()
    trainer.step = 1
    path = trainer.save()
    trainee = create_trainee("m", base, 4, 1, PARTS, "fp32")
    load_state(trainee, path, with_optimizer=True)
    expected = trainable(trainer.model)
    assert all(torch.equal(t, expected[n]) for n, t in trainable(trainee.model).items())
    assert same_optimizer_state(trainee.optimizer.state_dict(), trainer.optimizer.state_dict())
    assert trainee.steps == 1


def test_a_save_state_round_trips_exactly_and_stays_a_sampler_dir(base, tmp_path):
    trainee = trained(base)
    out = save_state(trainee, tmp_path / "s")
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert {"adapter_config.json", "weights.safetensors"} <= set(
        json.loads((out / "manifest.json").read_text())["files"]
    )
    weights, optimizer = trainable(trainee.model), trainee.optimizer.state_dict()
    fresh = create_trainee("m2", base, 4, 1, PARTS, "fp32")
    load_state(fresh, out, with_optimizer=True)
    assert all(torch.equal(t, weights[n]) for n, t in trainable(fresh.model).items())
    assert same_optimizer_state(fresh.optimizer.state_dict(), optimizer) and fresh.steps == 2


def test_a_state_of_the_older_tinker_format_is_refused_in_one_line(base, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "tinker_state.json").write_text(json.dumps({"base": base, "rank": 4, "steps": 0, "parts": PARTS}))
    trainee = create_trainee("m", base, 4, 0, PARTS, "fp32")
    with pytest.raises(UserError, match=r"older Tinker format \(tinker_state\.json\)") as info:
        load_state(trainee, old, with_optimizer=False)
    assert "\n" not in str(info.value) and "manifest.json" in str(info.value)


def test_optim_step_applies_the_requests_adamw_settings_to_the_trainers_optimizer(base):
    trainee = create_trainee("m", base, 4, 0, PARTS, "fp32")
    params = [p for g in trainee.optimizer.param_groups for p in g["params"]]
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    trainee.model(input_ids=ids).logits.pow(2).mean().backward()
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for c, p in zip(copies, params):
        c.grad = p.grad.clone()
    reference = torch.optim.AdamW(copies, lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1)
    optim_step(trainee, 0.05, (0.8, 0.9), 1e-3, 0.1, 0.0)
    reference.step()
    group = trainee.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (0.05, (0.8, 0.9), 1e-3, 0.1)
    assert all(torch.allclose(p, c, atol=0, rtol=1e-6) for p, c in zip(params, copies))


def test_tinker_parts_pick_layers_through_the_lora_configs_target_selection(base):
    model = load_model(base)
    assert linear_targets(model, ["attn"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert linear_targets(model, ["mlp"]) == ["down_proj", "gate_proj", "up_proj"]
    assert linear_targets(model, ["unembed"]) == ["lm_head"]
    assert linear_targets(model, ALL_LINEAR) == sorted(linear_targets(model, ["attn"]) + linear_targets(model, ["mlp"]))
    with pytest.raises(ValueError, match="embed"):
        linear_targets(model, ["embed"])
    only_mlp = create_trainee("m", base, 4, 0, {"train_attn": False, "train_mlp": True, "train_unembed": True}, "fp32")
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n in trainable(only_mlp.model) if ".lora_A." in n}
    assert adapted == {"down_proj", "gate_proj", "up_proj", "lm_head"}
