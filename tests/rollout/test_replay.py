"""The replay check of the correctness contract: a rollout sampled with each engine kind this host
runs, replayed through the trainer's log-prob path, agrees within a stated epsilon (fp32: 1e-5;
bf16: the bound measured on the default model, `rollout.replay.BF16_EPSILON`), and the check fails
when the engine samples from weights the trainer does not have (a planted wrong sync)."""

import copy
import importlib.util

import pytest
import torch

from tempering.config import EngineSettings, SamplingParams
from tempering.rollout.replay import BF16_EPSILON, FP32_EPSILON, replay
from tempering.rollout.select import build_engine
from tests.conftest import tiny_llama

VOCAB = 256
PARAMS = SamplingParams(n=4, max_new_tokens=16, temperature=1.0, seed=0)


@pytest.fixture(scope="module")
def target(smol_tokenizer, tmp_path_factory):
    """(model, tokenizer, prompts, draft dir): the draft is the target itself, so every draft token is
    accepted and the speculative engine's multi-token verification is what gets replayed."""
    model = tiny_llama(vocab=VOCAB, seed=3).eval()
    model.config.eos_token_id = VOCAB - 1
    draft = tmp_path_factory.mktemp("draft")
    model.save_pretrained(draft)
    prompts = [[t % VOCAB for t in smol_tokenizer.encode(s)] for s in ("hello there", "What is 2+2?", "a b a b a b")]
    return model, smol_tokenizer, prompts, str(draft)


def engine_kinds(draft_dir: str) -> dict[str, EngineSettings]:
    """Every engine kind this host can build (vLLM where it and a GPU are present)."""
    kinds = {
        "hf": EngineSettings(kind="hf"),
        "batching": EngineSettings(kind="batching"),
        "speculative-lookup": EngineSettings(kind="speculative", draft={}),
        "speculative-model": EngineSettings(kind="speculative", draft={"model": draft_dir}),
    }
    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        kinds["vllm"] = EngineSettings(kind="vllm")
    return kinds


def assert_replay_agrees(engine, model, prompts, precision: str, epsilon: float) -> dict[str, float]:
    figures = replay(engine, model, prompts, PARAMS, precision)
    assert figures["tokens"] > 0
    assert figures["max"] <= epsilon, f"{precision} replay: largest |log p_train - log p_rollout| {figures}"
    return figures


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_engine_kind_replays_within_epsilon(target, precision):
    model, tokenizer, prompts, draft = target
    epsilon = FP32_EPSILON if precision == "fp32" else BF16_EPSILON
    for name, settings in engine_kinds(draft).items():
        if name == "vllm":
            continue  # vLLM loads from a directory: tests/gpu replays it on a GPU host
        engine = build_engine(settings, model, tokenizer, precision)
        figures = assert_replay_agrees(engine, model, prompts, precision, epsilon)
        assert figures["logprob_mismatch"] <= figures["logprob_mismatch_p99"] <= figures["max"], name


def stale_copy(model, noise: float, seed: int = 0):
    """The engine's own copy of the weights after a sync that went wrong (stale or corrupted tensors)."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(noise * torch.randn(p.shape, generator=g))
    return out


def test_a_planted_wrong_weight_sync_fails_the_replay_on_every_engine_kind(target):
    model, tokenizer, prompts, draft = target
    for name, settings in engine_kinds(draft).items():
        if name == "vllm":
            continue
        engine = build_engine(settings, stale_copy(model, 0.02), tokenizer, "fp32")
        with pytest.raises(AssertionError, match="largest"):
            assert_replay_agrees(engine, model, prompts, "fp32", FP32_EPSILON)


def test_sampling_in_bf16_and_training_in_fp32_fails_the_fp32_replay(target):
    model, tokenizer, prompts, _ = target
    engine = build_engine(EngineSettings(kind="hf"), model, tokenizer, "bf16")
    with pytest.raises(AssertionError, match="largest"):
        assert_replay_agrees(engine, model, prompts, "fp32", FP32_EPSILON)
