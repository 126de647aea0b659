"""Each CUDA-only branch of src/ (tagged `# cuda-path: KEY` there) run on a GPU, on tiny random models.

Every test takes a `device`: "cuda" is marked `gpu(covers=[...])` and skips without a GPU
(tests/conftest.py); "cpu" runs the same body here, so a bug in the test itself shows on any
machine. `tests/test_cuda_paths.py` fails when a tagged key has no gpu test naming it.

Tolerance of engine output on a GPU against the CPU in fp32: the same greedy tokens, and
log-probs within 1e-4 (TF32 matmuls are off by default in torch; what differs is the float
summation order of the kernels, ~1e-6 on these logits, far below the top-2 margins of a
random 2-layer model).
"""

import subprocess

import pytest
import torch

from tempering.config import EngineSettings, GRPOSettings, PreferenceSettings, SamplingParams, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.data.pair_batches import PairBatches
from tempering.objectives.dpo import PreferenceObjective
from tempering.objectives.grpo import GRPOObjective
from tempering.objectives.sft import SFTObjective
from tempering.rollout.select import build_engine
from tempering.rollout.source import RolloutSource
from tempering.train.trainer import Trainer
from tempering.types import Task
from tests.conftest import random_examples, tiny_llama
from tests.train.test_distributed import sft_setup  # noqa: F401  (the fixture the torchrun test shares)


def on(gpu: pytest.MarkDecorator) -> list:
    """The two devices of a test: the CPU always, CUDA with its `gpu(covers=[...])` mark."""
    return [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=gpu)]


def _trainer(model, objective, batches, tmp_path, **kw) -> Trainer:
    settings = {"steps": 2, "batch_size": 4, "precision": "fp32", "seed": 0, "checkpoint": {"every": 100}, **kw}
    return Trainer(model, objective, batches, TrainSettings.model_validate(settings), tmp_path)


def assert_trained_on(trainer: Trainer, device: str) -> None:
    """One applied step with a finite loss, every trainable parameter on `device`."""
    record = trainer.train_step()
    assert record is not None and trainer.step == 1
    assert torch.isfinite(torch.tensor(record["loss"])) and record["grad_norm"] is not None
    assert {p.device.type for _, p in trainer.named} == {device}


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["bf16-cuda"])))
def test_bf16_autocast_runs_the_models_matmuls_in_bf16(device):
    from tempering.models.precision import autocast, resolve_precision

    if device == "cuda":
        assert resolve_precision("auto") == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")
    model = tiny_llama().to(device)
    ids = torch.tensor([[5, 6, 7, 8]], device=device)
    with torch.no_grad(), autocast("bf16", torch.device(device)):
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
        logits = model.lm_head(hidden)
    assert logits.dtype == torch.bfloat16 and logits.device.type == device
    with torch.no_grad():
        full = model(input_ids=ids).logits
    assert (logits.float() - full).abs().max() < 0.05  # bf16 rounding of a 2-layer model's logits


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["default-device"])))
def test_models_loaded_for_sampling_go_to_the_gpu(device, tmp_path, smol_tokenizer):
    from tempering.models.precision import default_device
    from tempering.rollout.select import load_engine

    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the CPU case of default_device needs a machine without a GPU")
    assert default_device().type == device
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(tmp_path / "tiny")
    smol_tokenizer.save_pretrained(tmp_path / "tiny")
    for quantize in ("none", "int8"):
        engine = load_engine(EngineSettings(kind="hf"), str(tmp_path / "tiny"), "fp32", quantize=quantize)
        assert next(engine.model.parameters()).device.type == device
        [[done]] = engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, temperature=0.0))
        assert len(done.token_ids) == 4


def _greedy(settings: dict, model, tokenizer, device: str):
    engine = build_engine(EngineSettings.model_validate(settings), model.to(device), tokenizer, "fp32")
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [5, 6, 7, 8, 9, 5, 6, 7]]
    return engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0.0))


def assert_same_greedy(got, want) -> None:
    """Same tokens per completion; log-probs within 1e-4 (the module's stated tolerance)."""
    for got_group, want_group in zip(got, want, strict=True):
        for g, w in zip(got_group, want_group, strict=True):
            assert g.token_ids == w.token_ids
            assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-4


@pytest.mark.parametrize("kind", ["hf", "batching", "speculative-lookup", "speculative-model"])
@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["engine-cuda"])))
def test_engines_on_the_device_give_the_cpu_fp32_greedy_output(kind, device, smol_tokenizer, tmp_path):
    model = tiny_llama(vocab=len(smol_tokenizer), seed=5).eval()
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    settings: dict = {"kind": kind.split("-")[0]}
    if kind == "speculative-lookup":
        settings["draft"] = {"max_ngram": 2}
    if kind == "speculative-model":  # a 1-layer draft, loaded onto the target's device by build_drafter
        draft = tiny_llama(vocab=len(smol_tokenizer), seed=6)
        draft.config.num_hidden_layers = 1
        draft.model.layers = draft.model.layers[:1]
        draft.save_pretrained(tmp_path / "draft")
        settings["draft"] = {"model": str(tmp_path / "draft"), "k": 3}
    want = _greedy(settings, model, smol_tokenizer, "cpu")
    assert_same_greedy(_greedy(settings, model, smol_tokenizer, device), want)


def _tasks(n: int) -> list[Task]:
    return [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}, source="test")
        for i in range(n)
    ]


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["trainer-cuda", "pinned-copy"])))
def test_a_grpo_step_trains_on_the_device(device, lora, smol_tokenizer, tmp_path):
    model = tiny_llama(vocab=len(smol_tokenizer), seed=7).to(device)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=4, updates_per_batch=2, dynamic_sampling=False)
    engine = build_engine(EngineSettings(kind="batching"), model, smol_tokenizer, "fp32")
    source = RolloutSource(_tasks(8), engine, grpo, grad_accum=2, seed=0, model=model, precision="fp32")
    assert_trained_on(_trainer(model, GRPOObjective(grpo), source, tmp_path, grad_accum=2), device)


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["trainer-cuda", "pinned-copy"])))
def test_sft_and_dpo_steps_train_on_the_device(device, tmp_path):
    from tempering.objectives.dpo import pair_sums
    from tempering.train.reference import compute_reference_logps
    from tests.objectives.test_dpo import lora_model, random_pairs

    sft = SFTBatches(random_examples(8, seed=1), 4, 64, 0, True, seed=0)
    assert_trained_on(_trainer(tiny_llama(seed=0).to(device), SFTObjective(), sft, tmp_path / "sft"), device)
    model, pairs = lora_model().to(device), random_pairs(8, seed=3)
    ref = compute_reference_logps(pair_sums, model, pairs, 4, "fp32")
    assert ref.device.type == "cpu" and torch.isfinite(ref).all()
    dpo = PairBatches(pairs, 4, seed=0, ref_logps=ref)
    assert_trained_on(_trainer(model, PreferenceObjective(PreferenceSettings()), dpo, tmp_path / "dpo"), device)


@pytest.mark.parametrize("setting", ["compile", "gradient_checkpointing"])
@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu(covers=["compile-cuda"]))])
def test_compiled_and_checkpointed_layers_train_on_the_device(device, setting, tmp_path):
    """The two settings of the GPU check's large SFT sides (bench/gpu/PLAN.md), on CUDA only: their
    CPU cases run in tests/train (compiling on a CPU needs a host compiler and takes a minute)."""
    sft = SFTBatches(random_examples(8, seed=2), 4, 64, 0, True, seed=0)
    trainer = _trainer(tiny_llama(seed=0), SFTObjective(), sft, tmp_path, **{setting: True})
    assert_trained_on(trainer, device)


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["pinned-copy"])))
def test_a_batch_moves_to_the_device_unchanged(device):
    from tempering.batches import GRPOBatch, to_device

    ids = torch.arange(12).view(3, 4)
    batch = GRPOBatch(ids[:1], ids[:1] > 0, ids, ids > 2, ids > 3, ids > 4, ids.float() / 7, torch.ones(3), 12)
    moved = batch.to(device)
    assert moved.completion_ids.device.type == device and moved.old_logprobs is None
    assert torch.equal(moved.engine_logprobs.cpu(), batch.engine_logprobs)
    assert torch.equal(to_device(ids, torch.device(device)).cpu(), ids)


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["cuda-rng"])))
def test_a_checkpoints_rng_state_restores_the_gpu_generator(device):
    from tempering.train.checkpoint import rng_state, set_rng_state

    state = rng_state()
    assert ("cuda" in state) == (device == "cuda")
    first = torch.rand(4, device=device)
    set_rng_state(state)
    assert torch.equal(torch.rand(4, device=device), first)


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["nccl"])))
def test_torchrun_with_one_process_trains_through_the_process_group(device, sft_setup):
    """`torchrun --nproc_per_node 1 temper sft`: NCCL on a GPU, gloo on the CPU, the same code
    as the two-process gloo test (tests/train/test_distributed.py)."""
    from tests.train.test_distributed import TORCHRUN, env, step_records

    if device == "cpu" and torch.cuda.is_available():
        pytest.skip("the gloo case needs a machine without a GPU")
    cfg, runs = sft_setup
    command = [a if a != "2" else "1" for a in TORCHRUN] + [str(cfg), "--name", "one"]
    done = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = step_records(runs / "one")
    assert records and all(torch.isfinite(torch.tensor(r["loss"])) for r in records)
    assert (runs / "one" / "final").is_dir()
    assert f"precision fp32 on {device}" in done.stderr + done.stdout  # the Trainer's console line
