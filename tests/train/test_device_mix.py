"""Every tensor a batch source or engine hands the model is on the model's device: whole GRPO,
DPO, SFT and agent-RL steps run under `DeviceMixCheck` (tests/device_check.py), which regards
the tiny model as living on an accelerator and fails on a host tensor meeting it, as CUDA would."""

import pytest
import torch

from tempering.config import GRPOSettings, PreferenceSettings, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.data.pair_batches import PairBatches
from tempering.objectives.dpo import PreferenceObjective
from tempering.objectives.grpo import GRPOObjective
from tempering.objectives.sft import SFTObjective
from tempering.rollout.engine import HFEngine
from tempering.rollout.source import RolloutSource
from tempering.train.trainer import Trainer
from tempering.types import Task
from tests.conftest import random_examples, tiny_llama
from tests.device_check import DeviceMixCheck, DeviceMixError, assert_no_device_mix

SETTINGS = {"steps": 2, "batch_size": 4, "precision": "fp32", "seed": 0, "checkpoint": {"every": 100}}


def test_the_check_catches_a_host_tensor_meeting_the_model_and_passes_a_moved_one():
    model = tiny_llama().eval()
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(DeviceMixError, match="same device"), DeviceMixCheck(model), torch.no_grad():
        model(input_ids=ids)
    device = next(model.parameters()).device
    with DeviceMixCheck(model) as check, torch.no_grad():
        logits = model(input_ids=ids.to(device)).logits
        assert logits.argmax(-1).tolist()  # a host sync, counted
        with pytest.raises(DeviceMixError):
            _ = logits[0, :, :3] + torch.ones(3, 3)  # a host tensor made without device=
        _ = logits[0, :, :3] + torch.ones(3, 3, device=device) + torch.tensor(1.0)  # 0-dim host: allowed
    assert sum(check.syncs.values()) == 1


def _trainer(model, objective, batches, tmp_path, **kw):
    return Trainer(model, objective, batches, TrainSettings.model_validate({**SETTINGS, **kw}), tmp_path)


def _tasks(n):
    return [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}, source="test")
        for i in range(n)
    ]


@pytest.mark.parametrize("updates_per_batch", [1, 2])
def test_a_grpo_step_keeps_every_tensor_on_the_models_device(smol_tokenizer, tmp_path, updates_per_batch):
    model = tiny_llama(vocab=49152, seed=7)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    grpo = GRPOSettings(
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        updates_per_batch=updates_per_batch,
        dynamic_sampling=False,
    )
    engine = HFEngine(model, smol_tokenizer, precision="fp32")
    source = RolloutSource(_tasks(8), engine, grpo, grad_accum=2, seed=0, model=model, precision="fp32")
    trainer = _trainer(model, GRPOObjective(grpo), source, tmp_path, grad_accum=2)
    check = assert_no_device_mix(trainer.train_step, model)
    assert trainer.step == 1 and check.syncs


def test_an_sft_step_keeps_every_tensor_on_the_models_device(tmp_path):
    model = tiny_llama(seed=0)
    for packing in (True, False):
        batches = SFTBatches(random_examples(8, seed=1), 4, 64, 0, packing, seed=0)
        trainer = _trainer(model, SFTObjective(), batches, tmp_path / str(packing))
        assert_no_device_mix(trainer.train_step, model)
        assert trainer.step == 1


def test_a_dpo_step_keeps_every_tensor_on_the_models_device(tmp_path):
    from tempering.objectives.dpo import pair_sums
    from tempering.train.reference import compute_reference_logps
    from tests.objectives.test_dpo import lora_model, random_pairs

    model, pairs = lora_model(), random_pairs(8, seed=3)
    objective = PreferenceObjective(PreferenceSettings())
    cached = {}

    def reference():
        cached["ref"] = compute_reference_logps(pair_sums, model, pairs, 4, "fp32")

    assert_no_device_mix(reference, model)
    for ref in (cached["ref"], None):  # the cached reference, and the online one (adapters off per step)
        trainer = _trainer(model, objective, PairBatches(pairs, 4, seed=0, ref_logps=ref), tmp_path / str(ref is None))
        assert_no_device_mix(trainer.train_step, model)
        assert trainer.step == 1


def test_an_agent_rl_step_keeps_every_tensor_on_the_models_device(smol_tokenizer, tmp_path):
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings
    from tempering.agents.tasks import builtin_tasks, select
    from tempering.agents.training import AgentRolloutSource

    model = tiny_llama(vocab=49152, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    tasks = select(builtin_tasks("retry"), "train")[:4]
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=6, updates_per_batch=2, dynamic_sampling=False)
    engine = HFEngine(model, smol_tokenizer, precision="fp32")
    source = AgentRolloutSource(
        tasks,
        engine,
        AgentRenderer(smol_tokenizer),
        None,
        grpo,
        EpisodeSettings(),
        grad_accum=1,
        seed=0,
        credit="step",
        model=model,
    )
    trainer = _trainer(model, GRPOObjective(grpo), source, tmp_path)
    assert_no_device_mix(trainer.train_step, model)
    assert trainer.step == 1
