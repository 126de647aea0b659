"""`train.optim`: 8-bit AdamW states (torchao) train, resume exactly from a checkpoint and take
under a third of fp32's state bytes; 8-bit states on an optimizer without states are refused."""

import pytest
import torch
from pydantic import ValidationError

from tempering.config import OptimSettings, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.objectives.sft import SFTObjective
from tempering.train.optimizer import build_optimizer, state_bytes
from tempering.train.trainer import Trainer
from tests.conftest import random_examples

pytest.importorskip("torchao", reason="torchao (the `memory` extra; `dev` installs it)")


@pytest.fixture(autouse=True)
def eager_optimizer_step(monkeypatch):
    # torchao compiles its update per parameter shape (tens of seconds once); the same tensor code
    # runs eagerly here (torch.compile reads this variable at each call), and the bench runs it compiled.
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")


def wide_llama(seed: int = 0):
    """A 2-layer Llama whose MLP and attention matrices have >= 4096 values (torchao quantises those)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LlamaForCausalLM(cfg)


def make_trainer(run_dir, **optim):
    s = TrainSettings.model_validate(
        {
            "steps": 8,
            "batch_size": 4,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "state_bits": 8, **optim},
            "checkpoint": {"every": 4},
        }
    )
    batches = SFTBatches(random_examples(24, seed=7), s.batch_size, 128, 0, True, seed=0)
    return Trainer(wide_llama(), SFTObjective(), batches, s, run_dir)


def test_sgd_with_8bit_states_is_a_one_line_error():
    with pytest.raises(ValidationError) as err:
        OptimSettings.model_validate({"name": "sgd", "state_bits": 8})
    assert "sgd keeps none" in str(err.value)


def test_8bit_states_are_under_a_third_of_fp32():
    sizes = {}
    for bits in (32, 8):
        model = wide_llama()
        opt = build_optimizer(model.parameters(), OptimSettings(state_bits=bits, lr=1e-3))
        model(torch.randint(3, 64, (2, 16)), labels=torch.randint(3, 64, (2, 16))).loss.backward()
        opt.step()
        sizes[bits] = state_bytes(opt)
    assert type(opt.state[model.model.layers[0].mlp.up_proj.weight]["exp_avg"]).__name__ == "OptimState8bit"
    assert sizes[8] < sizes[32] / 3


def test_8bit_states_train_and_resume_exactly(tmp_path):
    class Killed(Exception):
        pass

    def kill_at_6(step, record):
        if step == 6:
            raise Killed()

    straight = make_trainer(tmp_path / "a")
    result = straight.fit()
    assert sum(result.losses[-2:]) < sum(result.losses[:2])
    killed = make_trainer(tmp_path / "b")
    killed.callbacks.append(kill_at_6)
    with pytest.raises(Killed):
        killed.fit()
    resumed = make_trainer(tmp_path / "b")
    assert resumed.fit().resumed_from == 4
    for (name, a), (_, b) in zip(straight.named, resumed.named):
        assert torch.equal(a, b), name


def test_8bit_step_without_a_cxx_compiler_runs_eagerly(monkeypatch):
    """Where inductor's CPU probe is refused (no C++ compiler), torchao's compiled update would
    fail at its first step: it runs eagerly instead, the same numbers as TORCHDYNAMO_DISABLE's."""
    from torch._inductor import config

    from tempering.models import cpu_features

    def one_step() -> torch.Tensor:
        torch.manual_seed(0)
        param = torch.nn.Parameter(torch.randn(64, 128))
        opt = build_optimizer([param], OptimSettings(lr=1e-2, state_bits=8))
        param.grad = torch.randn(64, 128)
        opt.step()
        return param.detach().clone()

    reference = one_step()  # TORCHDYNAMO_DISABLE=1 (the fixture)
    monkeypatch.delenv("TORCHDYNAMO_DISABLE")
    monkeypatch.setattr(config.cpp, "cxx", ("no-such-cxx-for-tempering",), raising=False)
    cpu_features.clear()
    try:
        assert not cpu_features.supports("inductor_cpp")
        assert torch.equal(one_step(), reference)
    finally:
        cpu_features.clear()
