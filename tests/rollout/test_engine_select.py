"""Engine selection by config and the vLLM engine's logic that needs no GPU: the refusal
where vLLM or a GPU is absent, weight-sync bookkeeping (a torch model as the receiver),
LoRA-merged weight names, and the mapping of requests and outputs."""

import importlib.util
import json
import re
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from tempering.config import EngineSettings, SamplingParams, load_config
from tempering.hashing import tensors_hash
from tempering.models.logprobs import token_logprobs
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import HFEngine
from tempering.rollout.select import EngineUnavailable, build_engine
from tempering.rollout.vllm_engine import (
    WeightSync,
    WeightSyncError,
    completions_from_vllm,
    vllm_named_weights,
    vllm_sampling_kwargs,
    vllm_unavailable,
)
from tests.conftest import tiny_llama

NO_VLLM = importlib.util.find_spec("vllm") is None


def test_kind_selects_the_engine(smol_tokenizer):
    model = tiny_llama(vocab=64)
    assert type(build_engine(EngineSettings(kind="hf"), model, smol_tokenizer, "fp32")) is HFEngine
    engine = build_engine(EngineSettings(max_slots=5), model, smol_tokenizer, "fp32")
    assert type(engine) is BatchingEngine and engine.max_slots == 5  # batching is the default kind


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed here")
def test_vllm_without_vllm_is_refused_with_the_way_out(smol_tokenizer):
    reason = vllm_unavailable()
    assert "not installed" in reason and "pip install 'tempering[vllm]'" in reason and "engine.kind: batching" in reason
    with pytest.raises(EngineUnavailable, match="needs vLLM, which is not installed"):
        build_engine(EngineSettings(kind="vllm"), tiny_llama(vocab=64), smol_tokenizer, "fp32", model_dir="/x")


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed here")
def test_grpo_with_a_vllm_engine_fails_in_one_line_before_any_work(tmp_path):
    from tempering.cli import app
    from tests.test_cli_errors import one_line_error

    line = one_line_error(
        CliRunner().invoke(
            app, ["grpo", "examples/grpo_arith.yaml", "--set", "engine.kind=vllm", "--out", str(tmp_path)]
        )
    )
    assert "engine kind 'vllm' needs vLLM" in line
    assert list(tmp_path.iterdir()) == []  # no run dir, no registry: refused before any work


def test_an_unknown_engine_kind_is_a_config_error(tmp_path):
    from tempering.config import ConfigError, EvalConfig

    path = tmp_path / "e.yaml"
    path.write_text("suites: [arithmetic]\nout: x\nengine: {kind: vlm}\n")
    with pytest.raises(ConfigError, match="engine.kind"):
        load_config(EvalConfig, path)


def _probe(sender, receiver):
    ids = torch.tensor([[5, 9, 17, 33, 2, 40]])
    ones = torch.ones_like(ids)
    with torch.no_grad():
        a, _ = token_logprobs(sender, ids, ones, ones)
        b, _ = token_logprobs(receiver, ids, ones, ones)
    return float((a - b).abs().max())


def test_weight_sync_times_checksums_counts_and_verifies():
    trainer, engine_side = tiny_llama(vocab=64, seed=1), tiny_llama(vocab=64, seed=2)
    sync = WeightSync(lambda items: engine_side.load_state_dict(dict(items)), lambda: _probe(trainer, engine_side))
    named = vllm_named_weights(trainer)
    record = sync.push(named)
    # 64x32 embedding + 64x32 head + final norm 32 + per layer (q 32x32, k 32x16, v 32x16, o 32x32,
    # gate/up/down 3 x 32x64, 2 norms of 32) = 2048 + 2048 + 32 + 2 * 9280 = 22688 fp32 values
    assert record.bytes == 22688 * 4 and record.tensors == len(trainer.state_dict())
    assert record.checksum == tensors_hash(trainer.state_dict().items()) and record.probe_max_abs_diff == 0.0
    assert record.load_s >= 0 and record.checksum_s >= 0 and sync.records == [record]
    with torch.no_grad():
        trainer.model.layers[0].self_attn.q_proj.weight.add_(0.1)
    second = sync.push(vllm_named_weights(trainer))
    assert second.index == 1 and second.checksum != record.checksum


def test_a_sync_that_leaves_weights_behind_fails_loudly():
    trainer, engine_side = tiny_llama(vocab=64, seed=1), tiny_llama(vocab=64, seed=2)

    def lossy(items):  # a loader that silently skips the attention weights of layer 0
        engine_side.load_state_dict({k: v for k, v in items if "layers.0.self_attn" not in k}, strict=False)

    sync = WeightSync(lossy, lambda: _probe(trainer, engine_side), tolerance=1e-3)
    with pytest.raises(WeightSyncError, match=r"sync 0 \(sha256 [0-9a-f]{12}\) did not take"):
        sync.push(vllm_named_weights(trainer))
    assert sync.records == []


def test_lora_weights_go_out_merged_under_plain_names():
    from tempering.config import LoraSettings
    from tempering.models.lora import apply_lora

    plain_names = set(tiny_llama(vocab=64).state_dict())
    model = apply_lora(tiny_llama(vocab=64, seed=3), LoraSettings(r=2, alpha=4), "tiny")
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    named = vllm_named_weights(model)
    assert set(named) == plain_names
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    expected = (
        layer.base_layer.weight
        + layer.scaling["default"] * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    )
    assert torch.allclose(named["model.layers.0.self_attn.q_proj.weight"], expected, atol=1e-6)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the trainer's weights untouched


def test_sampling_params_map_to_vllm_arguments():
    p = SamplingParams(n=4, temperature=0.7, top_p=0.9, max_new_tokens=33, stop=("\n\n",), stop_token_ids=(7,))
    assert vllm_sampling_kwargs(p, seed=12) == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 33,
        "stop": ["\n\n"],
        "stop_token_ids": [7],
        "seed": 12,
        "logprobs": 0,
        "skip_special_tokens": False,
    }
    assert vllm_sampling_kwargs(SamplingParams(), None)["stop"] is None


def test_vllm_outputs_become_completions_with_the_sampled_tokens_logprobs():
    lp = lambda v: SimpleNamespace(logprob=v)
    outputs = [
        SimpleNamespace(
            outputs=[
                SimpleNamespace(
                    token_ids=[5, 2],
                    logprobs=[{5: lp(-0.5), 9: lp(-1.0)}, {2: lp(-0.25)}],
                    text="hi",
                    finish_reason="stop",
                ),
                SimpleNamespace(token_ids=[6, 6, 6], logprobs=[{6: lp(-1.5)}] * 3, text="xxx", finish_reason="length"),
            ]
        )
    ]
    ((a, b),) = completions_from_vllm(outputs)
    assert (a.token_ids, a.logprobs, a.text, a.finish_reason) == ([5, 2], [-0.5, -0.25], "hi", "stop")
    assert (b.logprobs, b.truncated, b.prompt_index) == ([-1.5] * 3, True, 0)


# --- kind: speculative, built from config ---


@pytest.fixture(scope="module")
def speculative_setup(tmp_path_factory):
    """A peaked 2-layer target, its 1-layer cut saved as a draft dir, 40 prompts and the target's greedy tokens."""
    from tests.rollout.test_speculative import _IdsTokenizer, _peaked

    target, tok = _peaked(64, seed=0), _IdsTokenizer(64, eos=2)
    draft_dir = tmp_path_factory.mktemp("draft")
    _peaked(64, seed=0, layers=1).save_pretrained(draft_dir)
    gen = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(3, 64, (int(torch.randint(2, 10, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(40)
    ]
    params = SamplingParams(temperature=0, max_new_tokens=16)
    reference = [g[0].token_ids for g in HFEngine(target, tok, precision="fp32").generate(prompts, params)]
    return target, tok, str(draft_dir), prompts, params, reference


@pytest.mark.parametrize(
    "draft",
    [{"k": 4}, {"k": 3, "min_confidence": 0.3, "vocab": "VOCAB"}, None],
    ids=["model", "fr-spec-confident", "prompt-lookup"],
)
def test_speculative_from_config_gives_the_targets_greedy_tokens(speculative_setup, tmp_path, draft):
    """`engine: {kind: speculative, draft: ...}` through build_engine: a draft model loaded from
    its spec (also with an FR-Spec head read from a JSON list and a confidence stop), or prompt
    lookup; greedy tokens equal the target alone, the identity is the target's."""
    from tempering.rollout.speculative import SpeculativeEngine

    target, tok, draft_dir, prompts, params, reference = speculative_setup
    if draft is None:
        draft_cfg = {"max_ngram": 2}
    else:
        draft_cfg = {"model": draft_dir, **draft}
        if draft_cfg.get("vocab") == "VOCAB":
            (tmp_path / "vocab.json").write_text(json.dumps(list(range(32))))
            draft_cfg["vocab"] = str(tmp_path / "vocab.json")
    engine = build_engine(EngineSettings(kind="speculative", draft=draft_cfg), target, tok, "fp32")
    assert type(engine) is SpeculativeEngine and engine.k == draft_cfg.get("k", 4)
    assert [g[0].token_ids for g in engine.generate(prompts, params)] == reference
    assert engine.identity == HFEngine(target, tok, precision="fp32").identity
    assert engine.stats.summary()["acceptance_rate"] > 0  # the draft was used, not bypassed
    if draft is not None:
        assert engine.drafter.model.config.num_hidden_layers == 1  # the draft dir, not the target
        assert engine.drafter.min_confidence == draft.get("min_confidence", 0.0)
        assert (engine.drafter.vocab is None) == ("vocab" not in draft)


@pytest.mark.parametrize(
    "engine, message",
    [
        (
            "{kind: batching, draft: {model: d}}",
            "engine.draft applies to engine kind 'speculative' only, not 'batching'",
        ),
        ("{draft: {}}", "engine.draft applies to engine kind 'speculative' only, not 'batching'"),
        ("{kind: speculative}", "engine kind 'speculative' needs a draft"),
        ("{kind: hf, max_slots: 8}", "engine.max_slots applies to engine kind 'batching' only, not 'hf'"),
        ("{kind: speculative, draft: {}, vllm: {max_model_len: 64}}", "engine.vllm applies to engine kind 'vllm' only"),
        ("{kind: speculative, draft: {min_confidence: 0.4}}", "draft min_confidence apply to a draft model"),
        ("{kind: speculative, draft: {model: d, max_ngram: 2}}", "draft max_ngram apply to prompt lookup"),
        ("{kind: speculative, draft: {min_ngram: 3, max_ngram: 2}}", "draft.min_ngram 3 exceeds draft.max_ngram 2"),
    ],
)
def test_an_engine_key_that_would_do_nothing_fails_at_load(tmp_path, engine, message):
    from tempering.config import ConfigError, EvalConfig

    path = tmp_path / "e.yaml"
    path.write_text(f"suites: [arithmetic]\nout: x\nengine: {engine}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(EvalConfig, path)


def test_commands_that_sampled_with_hfengine_still_do_unless_engine_says_otherwise(tmp_path):
    """stratify, synth, pairs, best-of-n, agent and chat default to kind hf (their engine before
    `engine:` existed), also for an `engine:` section without `kind`; eval and GRPO to batching."""
    from tempering.agents.config import AgentConfig
    from tempering.config import (
        BestOfNSettings,
        ChatConfig,
        ConfigError,
        EvalConfig,
        GRPOConfig,
        PairsConfig,
        StratifyConfig,
        SynthConfig,
    )

    hf_default = [StratifyConfig(), SynthConfig(), PairsConfig(output="p.jsonl"), BestOfNSettings(), ChatConfig()]
    hf_default.append(AgentConfig(train={"steps": 1}))
    assert [c.engine.kind for c in hf_default] == ["hf"] * 6
    assert EvalConfig(suites=["arithmetic"], out="x").engine.kind == "batching"
    assert GRPOConfig.model_fields["engine"].default.kind == "batching"
    path = tmp_path / "s.yaml"
    path.write_text("engine: {draft: {max_ngram: 2}}\n")
    with pytest.raises(ConfigError, match="engine.draft applies to engine kind 'speculative' only, not 'hf'"):
        load_config(StratifyConfig, path)
    path.write_text("engine: {kind: speculative, draft: {model: some/draft, k: 3}}\n")
    assert load_config(SynthConfig, path).engine.draft.k == 3
    assert load_config(StratifyConfig, None, ["engine.kind=batching", "engine.max_slots=8"]).engine.max_slots == 8


def test_agent_training_and_serving_refuse_engines_they_cannot_drive():
    from pydantic import ValidationError

    from tempering.agents.config import AgentConfig
    from tempering.serve.config import SLOTS, ServeConfig

    with pytest.raises(ValidationError, match="never syncs weights"):
        AgentConfig(train={"steps": 1}, engine={"kind": "vllm"})
    with pytest.raises(ValidationError, match="engine.kind 'hf' cannot serve"):
        ServeConfig(engine={"kind": "hf"})
    assert ServeConfig().engine.max_slots == SLOTS == 32  # the served slots as before `engine:`


def test_load_engine_loads_the_spec_and_builds_the_named_engine(tmp_path, smol_tokenizer):
    from tempering.rollout.select import load_engine

    tiny_llama(vocab=len(smol_tokenizer)).save_pretrained(tmp_path)
    smol_tokenizer.save_pretrained(tmp_path)
    engine = load_engine(EngineSettings(kind="hf"), str(tmp_path), "fp32")
    assert type(engine) is HFEngine and engine.precision == "fp32"
    int8 = load_engine(EngineSettings(max_slots=3), str(tmp_path), "bf16", quantize="int8")
    assert type(int8) is BatchingEngine and int8.max_slots == 3 and int8.precision == "fp32"  # int8 picks its dtype


def test_engine_with_scale_replicas_is_an_error_not_ignored():
    """Under `scale:` Ray replicas sample (HFEngine in each actor), so an `engine:` beside it would do nothing."""
    from tempering.config import ConfigError, EvalConfig, GRPOConfig

    for model, base in ((EvalConfig, ["suites=[arithmetic]", "out=x"]), (GRPOConfig, ["train.steps=1"])):
        assert load_config(model, None, base + ["scale.engine_replicas=2"]).scale.engine_replicas == 2
        with pytest.raises(ConfigError, match="engine: does nothing with scale:"):
            load_config(model, None, base + ["scale.engine_replicas=2", "engine.kind=hf"])
