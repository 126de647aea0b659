"""`train.fsdp`: FSDP2 over `torchrun --nproc_per_node 2` (gloo) trains like one process, and resumes exactly.

Tolerance (fp32), as for plain data-parallel training (tests/train/test_distributed.py): per-step
losses within 1e-5 and final weights within 1e-4 of one process on the same global batches. The
difference is the float summation order of the reduce-scatter (measured: losses 1.2e-6, weights
2.8e-6 after 8 steps). The sharded run also checkpoints its activations, which changes no number.
"""

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import SFTConfig
from tempering.config.base import ConfigError
from tempering.config.loading import load_config
from tempering.data.builtin import arithmetic_conversations
from tests.conftest import tiny_llama
from tests.train.test_distributed import TORCHRUN, env, run_killing_rank1, step_records

TOL, WEIGHT_TOL = 1e-5, 1e-4
STEPS = 8


@pytest.fixture()
def configs(tmp_path, smol_tokenizer):
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(64, 1)))
    paths = []
    for sharded in (False, True):
        cfg = {
            "model": str(model),
            "lora": None,
            "data": {"train": str(train), "max_length": 160},
            "train": {
                "steps": STEPS,
                "batch_size": 4,
                "grad_accum": 2,
                "precision": "fp32",
                "fsdp": sharded,
                "gradient_checkpointing": sharded,
                "optim": {"lr": 3e-3, "warmup_steps": 2},
                "checkpoint": {"every": 2, "keep_last": 2},
            },
            "out": str(tmp_path / "runs"),
        }
        path = tmp_path / f"sft-{'fsdp' if sharded else 'one'}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        paths.append(path)
    return paths[0], paths[1], tmp_path / "runs"


def test_fsdp_on_two_processes_matches_one_and_resumes_exactly_after_a_kill(configs):
    one_cfg, fsdp_cfg, runs = configs
    one = CliRunner().invoke(app, ["sft", str(one_cfg), "--name", "one"])
    assert one.exit_code == 0, one.output

    code, _ = run_killing_rank1(fsdp_cfg, runs / "two", after_step=5)
    assert code != 0 and not (runs / "two" / "final").exists()
    first = {r["step"]: r["loss"] for r in step_records(runs / "two")}
    again = subprocess.run(TORCHRUN + [str(fsdp_cfg), "--name", "two"], env=env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout[again.stdout.index("{") :])
    assert summary["resumed_from"] in (2, 4) and summary["resumed_from"] < max(first)
    records = step_records(runs / "two")
    redone = [r for r in records[len(first) :] if r["step"] in first]
    assert redone and all(r["loss"] == first[r["step"]] for r in redone)  # the resume is bit-identical

    losses = {r["step"]: r["loss"] for r in step_records(runs / "one")}
    two = {r["step"]: r["loss"] for r in records}
    assert sorted(two) == sorted(losses) == list(range(1, STEPS + 1))
    assert max(abs(two[s] - losses[s]) for s in losses) < TOL
    assert losses[STEPS] < losses[1]

    # the checkpoint and the final model hold full tensors in the one-process layout
    ckpt = sorted((runs / "two" / "checkpoints").glob("step-*"))[-1]
    plain = sorted((runs / "one" / "checkpoints").glob("step-*"))[-1]
    c1, c2 = load_file(plain / "weights.safetensors"), load_file(ckpt / "weights.safetensors")
    assert {k: v.shape for k, v in c1.items()} == {k: v.shape for k, v in c2.items()}
    o1, o2 = torch.load(plain / "optimizer.pt"), torch.load(ckpt / "optimizer.pt")
    assert o1["state"].keys() == o2["state"].keys()
    assert all(o1["state"][i]["exp_avg"].shape == o2["state"][i]["exp_avg"].shape for i in o1["state"])
    w1 = load_file(runs / "one" / "final" / "model.safetensors")
    w2 = load_file(runs / "two" / "final" / "model.safetensors")
    assert w1.keys() == w2.keys()
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < WEIGHT_TOL
    w0 = load_file(fsdp_cfg.parent / "tiny" / "model.safetensors")
    assert max(float((w1[k] - w0[k]).abs().max()) for k in w1) > 10 * WEIGHT_TOL  # the weights did move


def write(tmp_path, train: dict, lora: dict | None = None) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"lora": lora, "data": {"train": "x.jsonl"}, "train": {"steps": 1, **train}}))
    return str(path)


def test_fsdp_with_lora_or_compile_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="train.fsdp shards full-parameter training; set lora: null") as err:
        load_config(SFTConfig, write(tmp_path, {"fsdp": True}, lora={"r": 4}))
    assert "\n" not in str(err.value) and "c.yaml" in str(err.value)
    with pytest.raises(ConfigError, match="train.fsdp with train.compile is not supported"):
        load_config(SFTConfig, write(tmp_path, {"fsdp": True, "compile": True}))
    assert load_config(SFTConfig, write(tmp_path, {"fsdp": True})).train.fsdp


def test_fsdp_on_one_process_is_refused(tmp_path):
    from tempering.config import TrainSettings
    from tempering.objectives.sft import SFTObjective
    from tempering.train.trainer import Trainer

    with pytest.raises(ValueError, match="train.fsdp shards over torchrun processes and this is one process"):
        Trainer(tiny_llama(), SFTObjective(), object(), TrainSettings(steps=1, fsdp=True), tmp_path)  # type: ignore[arg-type]


SKIPPED_STEP = """
import os
import sys
import torch.distributed as dist
from tempering.data.batches import SFTBatches
from tempering.objectives.sft import SFTObjective
from tempering.train import fsdp
from tests.conftest import random_examples, tiny_llama

dist.init_process_group("gloo")
batch = SFTBatches(random_examples(4, seed=2), 4, 128, 0, True, seed=1).next_batch()
plain, sharded = tiny_llama(tie=True).train(), tiny_llama(tie=True).train()
SFTObjective().loss(plain, batch)[0].backward()
fsdp.shard_model(sharded)
SFTObjective().loss(sharded, batch)  # a step the guard skips: a forward pass and no backward
SFTObjective().loss(sharded, batch)[0].backward()
grads = dict(plain.named_parameters())
# both ranks ran the whole batch and the gradients are summed: twice one process's
err = max(float((fsdp.full_tensor(p.grad) - 2 * grads[n].grad).abs().max()) for n, p in sharded.named_parameters())
# one file per rank: two ranks printing to one pipe can interleave their lines
with open(os.path.join(sys.argv[1], f"max_error.{dist.get_rank()}"), "w") as out:
    out.write(repr(err))
# both ranks done before the group goes: a rank leaving while gloo still serves the other aborted
# in teardown once ("terminate called without an active exception", SIGABRT)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_forward_pass_without_backward_leaves_the_next_gradients_exact(tmp_path):
    script = tmp_path / "skipped_step.py"
    script.write_text(SKIPPED_STEP)
    cmd = TORCHRUN[:6] + [str(script), str(tmp_path)]
    run_env = env()
    run_env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + ":" + run_env["PYTHONPATH"]
    done = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = [float(p.read_text()) for p in sorted(tmp_path.glob("max_error.*"))]
    assert len(errors) == 2 and max(errors) < 1e-6, (errors, done.stdout[-2000:])
