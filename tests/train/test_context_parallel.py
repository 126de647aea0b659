"""Context parallelism (`train.context_parallel`): a row split over 2 gloo ranks trains like one process.

Tolerance (fp32): loss and every parameter's gradient within 1e-5 absolute of one process on
the whole rows; the only difference is the float summation order of the attention over gathered
keys and of the gradients summed over ranks (measured: loss 8.8e-8, gradients 2.2e-8, with and
without activation checkpointing, whose backward pass gathers the keys and values again).
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import SFTConfig, load_config
from tempering.errors import UserError
from tempering.train.context_parallel import (
    SequenceShard,
    check_world,
    shard_batch,
    zigzag_indices,
    zigzag_mask,
    zigzag_split,
    zigzag_unsplit,
)
from tempering.types import IGNORE
from tests.conftest import tiny_llama
from tests.train.test_distributed import TORCHRUN, env, step_records

TOL = 1e-5


def test_zigzag_keeps_an_early_and_a_late_chunk_per_rank():
    # 8 tokens, 2 ranks: chunks of 2 -> rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    assert zigzag_indices(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert zigzag_indices(8, 2, 1).tolist() == [2, 3, 4, 5]
    # 12 tokens, 3 ranks: chunks of 2 -> (0, 5), (1, 4), (2, 3)
    assert [zigzag_indices(12, 3, r).tolist() for r in range(3)] == [
        [0, 1, 10, 11],
        [2, 3, 8, 9],
        [4, 5, 6, 7],
    ]
    with pytest.raises(ValueError, match="does not split into 4 equal chunks"):
        zigzag_indices(6, 2, 0)


def test_zigzag_split_and_unsplit_are_inverse():
    x = torch.arange(24).reshape(2, 12) * 10  # rows 0..110 and 120..230
    parts = [zigzag_split(x, 3, r) for r in range(3)]
    assert parts[1].tolist() == [[20, 30, 80, 90], [140, 150, 200, 210]]
    assert torch.equal(zigzag_unsplit(parts), x)
    h = torch.randn(2, 8, 5)  # (B, T, H) along dim 1
    assert torch.equal(zigzag_unsplit([zigzag_split(h, 2, r) for r in range(2)]), h)


def test_zigzag_mask_is_causal_over_global_positions():
    shard = SequenceShard(ranks=2, rank=0, length=8)
    assert shard.query_positions().tolist() == [0, 1, 6, 7]
    assert shard.key_positions().tolist() == [0, 1, 6, 7, 2, 3, 4, 5]  # rank 0's keys, then rank 1's
    mask = zigzag_mask(shard.query_positions(), shard.key_positions()).int().tolist()
    assert mask == [
        [1, 0, 0, 0, 0, 0, 0, 0],  # position 0 sees itself
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 1, 1, 1, 1],  # position 6 sees 0..6, not 7
        [1, 1, 1, 1, 1, 1, 1, 1],
    ]


def test_a_batch_shard_pads_to_2n_chunks_and_carries_the_next_tokens():
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    labels = torch.tensor([[IGNORE, IGNORE, 7, 8, 9], [IGNORE, 6, 7, IGNORE, IGNORE]])
    batch = {"input_ids": ids, "labels": labels, "attention_mask": (ids != 0).long()}
    # 5 tokens pad to 8; rank 1 keeps positions 2..5, whose next tokens are labels 3..6
    shard = shard_batch(batch, ranks=2, rank=1)
    assert shard["input_ids"].tolist() == [[7, 8, 9, 0], [7, 0, 0, 0]]
    assert shard["targets"].tolist() == [[8, 9, IGNORE, IGNORE], [IGNORE, IGNORE, IGNORE, IGNORE]]
    assert shard["position_ids"].tolist() == [[2, 3, 4, 5]] * 2
    assert shard["n_real_tokens"] == 4  # 7 8 9 | 7
    zero = shard_batch(batch, ranks=2, rank=0)  # positions 0, 1, 6, 7
    assert zero["targets"].tolist() == [[IGNORE, 7, IGNORE, IGNORE], [6, 7, IGNORE, IGNORE]]
    assert zero["n_real_tokens"] == 2 + 2
    with pytest.raises(UserError, match="rows with images are not split over processes"):
        shard_batch({**batch, "pixel_values": torch.zeros(1, 3)}, ranks=2, rank=0)


# --- the one-line refusals ---


def _sft_config(tmp_path: Path, **train) -> dict:
    (tmp_path / "t.jsonl").write_text("")
    return {
        "data": {"train": str(tmp_path / "t.jsonl"), "packing": False},
        "train": {"steps": 1, "context_parallel": 2, **train},
    }


@pytest.mark.parametrize(
    ("train", "data", "message"),
    [
        ({}, {"packing": True}, "packed rows .* are not split yet: set data.packing: false"),
        ({"fsdp": True}, {}, "train.context_parallel with train.fsdp is not supported yet"),
        ({"compile": True}, {}, "train.context_parallel with train.compile is not supported yet"),
        ({"context_parallel": 0}, {}, "greater than or equal to 1"),
    ],
)
def test_config_refuses_what_context_parallelism_cannot_split(tmp_path, train, data, message):
    cfg = _sft_config(tmp_path, **train)
    cfg["data"].update(data)
    if "fsdp" in train:
        cfg["lora"] = None
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=message) as err:
        load_config(SFTConfig, path)
    assert "\n" not in str(err.value) and "train" in str(err.value)


def test_other_objectives_refuse_context_parallelism(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
    cfg = {
        "model": str(tmp_path / "never-loaded"),
        "data": {"train": str(pairs)},
        "train": {"steps": 1, "context_parallel": 2},
    }
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = CliRunner().invoke(app, ["dpo", str(path), "--out", str(tmp_path / "runs")])
    assert out.exit_code == 2, out.output
    assert "dpo: train.context_parallel is supported for sft only" in out.output


@pytest.mark.parametrize(
    ("size", "torchrun", "message"),
    [
        (1, False, r"splits each sequence over 2 processes and this is one; run under `torchrun --nproc_per_node 2`"),
        (3, True, "train.context_parallel 2 does not divide the 3 torchrun processes"),
        (4, True, "would combine it with data parallelism, which is not supported yet"),
    ],
)
def test_the_world_must_be_the_context_parallel_group(size, torchrun, message):
    check_world(2, 2, True)
    with pytest.raises(UserError, match=message) as err:
        check_world(2, size, torchrun)
    assert "\n" not in str(err.value)


def test_mixture_of_experts_models_are_refused(monkeypatch):
    from tempering.train.context_parallel import split_sequences
    from tests.conftest import tiny_moe

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "t")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(UserError, match="mixture-of-experts models are not supported yet"):
        split_sequences(tiny_moe(), object(), 2)


# --- 2 gloo ranks against one process ---


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch() -> dict:
    """Two rows of 22 and 15 tokens (right-padded), loss on the latter parts."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (2, 22), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    ids[1, 15:] = 0
    labels = ids.masked_fill(mask == 0, IGNORE)
    labels[0, :6], labels[1, :4] = IGNORE, IGNORE
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def _one_process() -> tuple[float, dict[str, torch.Tensor]]:
    from tempering.objectives.sft import SFTObjective

    model, objective, batch = tiny_llama(), SFTObjective(), _batch()
    loss_sum, _ = objective.loss(model, batch)
    loss = loss_sum / objective.units(batch)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


def _rank(rank: int, port: int, out: str, checkpointing: bool) -> None:
    import torch.distributed as dist

    from tempering.objectives.sft import SFTObjective
    from tempering.train import distributed
    from tempering.train.context_parallel import ATTENTION, register_attention

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        ref_loss, ref_grads = _one_process()
        model, objective = tiny_llama(), SFTObjective()
        if checkpointing:  # the backward pass recomputes each layer, gathering keys and values again
            from tempering.models.checkpointing import enable_checkpointing

            enable_checkpointing(model)
        model.train()
        assert model.is_gradient_checkpointing == checkpointing
        register_attention()
        model.set_attn_implementation(ATTENTION)
        shard = shard_batch(_batch(), ranks=2, rank=rank)  # type: ignore[arg-type]
        units = distributed.sum_over_ranks([objective.units(shard)])[0]
        loss_sum, _ = objective.loss(model, shard)
        (loss_sum / units).backward()
        distributed.all_reduce_grads(model.parameters())
        loss = distributed.sum_over_ranks([float(loss_sum) / units])[0]
        grads = {n: p.grad for n, p in model.named_parameters()}
        diffs = {
            "loss": abs(loss - ref_loss),
            "grad": max(float((grads[n] - ref_grads[n]).abs().max()) for n in ref_grads),
            "grad_scale": max(float(g.abs().max()) for g in ref_grads.values()),
            "local_tokens": shard["input_ids"].shape[1],
        }
        Path(out, f"rank{rank}.json").write_text(json.dumps(diffs))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_two_ranks_give_one_process_loss_and_gradients(tmp_path, checkpointing):
    import torch.multiprocessing as mp

    args = (_free_port(), str(tmp_path), checkpointing)
    ctx = mp.start_processes(_rank, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the 2 ranks did not finish in 120 s")
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    print("context parallel vs one process:", results)
    assert all(r["local_tokens"] == 12 for r in results)  # 22 tokens pad to 24, 12 per rank
    assert results[0]["grad_scale"] > 100 * TOL  # the gradients are not all ~0, so the match means something
    assert all(r["loss"] < TOL and r["grad"] < TOL for r in results)


# --- end to end: torchrun temper sft with train.context_parallel=2 ---


def test_torchrun_sft_with_context_parallelism_trains_like_one_process(tmp_path, smol_tokenizer):
    from tempering.data.builtin import arithmetic_conversations

    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(16, 1)))
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {"train": str(train), "max_length": 160, "packing": False},
        "train": {
            "steps": 3,
            "batch_size": 2,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "schedule": "constant"},
            "checkpoint": {"every": 2},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    one = CliRunner().invoke(app, ["sft", str(path), "--name", "one"])
    assert one.exit_code == 0, one.output
    two = subprocess.run(
        TORCHRUN + [str(path), "--name", "two", "--set", "train.context_parallel=2"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    runs = tmp_path / "runs"
    assert (runs / "two" / "checkpoints" / "step-00000002").is_dir()
    losses = {r["step"]: r["loss"] for r in step_records(runs / "one")}
    split = {r["step"]: r["loss"] for r in step_records(runs / "two")}
    assert sorted(split) == sorted(losses) == [1, 2, 3]
    assert max(abs(split[s] - losses[s]) for s in losses) < TOL
    assert [r["real_tokens"] for r in step_records(runs / "two")] == [
        r["real_tokens"] for r in step_records(runs / "one")
    ]
    # the saved model is a plain one (no trace of the split attention) and moved like one process's
    saved = json.loads((runs / "two" / "final" / "config.json").read_text())
    assert "tempering" not in json.dumps(saved)
    w1, w2 = (load_file(runs / n / "final" / "model.safetensors") for n in ("one", "two"))
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-4


def test_the_bench_smoke_run_writes_its_figures(tmp_path):
    out = tmp_path / "cp.json"
    bench = Path(__file__).resolve().parents[2] / "bench" / "throughput" / "cp.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--smoke", "--out", str(out)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert {"max_abs_grad_diff", "max_abs_loss_diff", "peak_mem_ratio_one_vs_two_ranks", "method", "host"} <= set(
        result
    )
    assert result["length"] == 64 and [r["tokens_held"] for r in result["two_ranks"]] == [32, 32]
    assert result["max_abs_grad_diff"] < TOL < result["max_abs_grad"]


@pytest.mark.parametrize("context_parallel", [1, 2])
def test_epochs_count_the_global_batch_under_torchrun(tmp_path, monkeypatch, context_parallel):
    from types import SimpleNamespace

    from tempering.recipes.recipe import with_epoch_steps
    from tempering.recipes.sft import SFT

    monkeypatch.setenv("WORLD_SIZE", "2")  # 2 processes share each global micro-batch (its rows or its tokens)
    (tmp_path / "t.jsonl").write_text("")
    cfg = SFTConfig.model_validate(
        {
            "data": {"train": [str(tmp_path / "t.jsonl")], "packing": False},
            "train": {"epochs": 1, "batch_size": 4, "context_parallel": context_parallel},
        }
    )
    # 16 examples, 4 per step (whatever the world size): 4 steps walk them once
    assert with_epoch_steps(SFT, cfg, SimpleNamespace(train=[None] * 16)).train.steps == 4


def test_whole_rows_run_plain_sdpa_through_the_registered_attention():
    """The held-out measure hands the model whole padded rows (no shard layout): the same loss as SDPA."""
    from tempering.objectives.sft import SFTObjective
    from tempering.train.context_parallel import ATTENTION, register_attention

    plain, split = tiny_llama(), tiny_llama()
    register_attention()
    split.set_attn_implementation(ATTENTION)
    assert split.config._attn_implementation == ATTENTION
    batch = _batch()
    batch["attention_mask"][1] = batch["attention_mask"][1].flip(0)  # padding first: the mask matters
    batch["labels"][1] = batch["labels"][1].masked_fill(batch["attention_mask"][1] == 0, IGNORE)
    with torch.no_grad():
        losses = [float(SFTObjective().loss(m, batch)[0]) for m in (plain, split)]
        unmasked = float(
            SFTObjective().loss(plain, {**batch, "attention_mask": torch.ones_like(batch["input_ids"])})[0]
        )
    assert losses[0] == losses[1] != unmasked
