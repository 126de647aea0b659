import json

import pytest
import torch
from pydantic import ValidationError

from tempering.config.longctx import RopeScaling
from tempering.models.rope import RopeScalingError, context_window, rope_summary, scale_rope
from tests.conftest import tiny_llama


def assert_one_line(message: str, *words: str) -> None:
    assert "\n" not in message and all(w in message for w in words), message


@pytest.mark.parametrize("kind", ["yarn", "linear", "dynamic"])
def test_a_scaled_model_exported_and_loaded_by_plain_transformers_gives_the_same_logits(tmp_path, kind):
    from transformers import AutoModelForCausalLM

    ids = torch.randint(3, 64, (1, 900), generator=torch.Generator().manual_seed(0))  # past the native 512
    plain = tiny_llama().eval()
    positions = torch.arange(900)[None]
    before = plain.model.rotary_emb(torch.ones(1), positions)
    scaled = scale_rope(plain, RopeScaling(type=kind, factor=2.0)).eval()
    with torch.no_grad():
        inside = scaled(ids).logits
    scaled.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["rope_parameters"]["rope_type"] == kind
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        outside = loaded(ids).logits
    assert context_window(loaded.config) == 1024 and rope_summary(loaded.config)["factor"] == 2.0
    assert torch.allclose(inside, outside, atol=1e-5, rtol=0)
    after = scaled.model.rotary_emb(torch.ones(1), positions)
    assert not torch.allclose(before[0], after[0], atol=1e-3)  # the scaling took effect (cos at long positions)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"type": "ntk-by-parts", "factor": 2}, ["type", "linear", "yarn"]),
        ({"type": "yarn", "factor": 1.0}, ["factor", "greater than 1"]),
        ({"type": "linear", "factor": 2, "beta_fast": 8}, ["beta_fast", "yarn only"]),
        ({"type": "yarn", "factor": 2, "beta_fast": 1, "beta_slow": 2}, ["beta_fast", "beta_slow"]),
        ({"type": "yarn", "factor": 2, "alpha": 1}, ["alpha"]),
    ],
)
def test_unknown_or_inconsistent_scaling_is_a_one_line_config_error(given, words):
    from tempering.config.base import ConfigError
    from tempering.config.loading import load_config

    with pytest.raises((ConfigError, ValidationError)) as err:
        load_config(RopeScaling, None, literal=given)
    assert_one_line(str(err.value), *words)


def test_scaling_a_model_without_room_or_twice_is_a_one_line_error():
    model = tiny_llama()
    with pytest.raises(RopeScalingError) as err:
        scale_rope(model, RopeScaling(type="yarn", factor=2, original_max_position_embeddings=4096))
    assert_one_line(str(err.value), "original_max_position_embeddings", "4096", "512")
    scale_rope(model, RopeScaling(type="yarn", factor=2))
    with pytest.raises(RopeScalingError) as err:
        scale_rope(model, RopeScaling(type="yarn", factor=2))
    assert_one_line(str(err.value), "already scaled")


def test_a_scaled_model_has_its_own_identity_for_eval_caches():
    from tempering.hashing import model_state_hash

    model = tiny_llama()
    before = model_state_hash(model)
    assert model_state_hash(scale_rope(model, RopeScaling(type="yarn", factor=2.0))) != before


def test_a_bad_rope_scaling_key_is_a_one_line_error_naming_it_through_the_config_loader():
    from tempering.config import ConfigError, EvalConfig, SFTConfig
    from tempering.config.loading import load_config

    train = {"data": {"train": "rows.jsonl"}, "train": {"steps": 1}}
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, ["rope_scaling={type: yarn, factor: 1.0}"], literal=train)
    assert_one_line(str(err.value), "rope_scaling.factor", "greater than 1")
    assert (
        load_config(SFTConfig, None, ["rope_scaling={type: yarn, factor: 2}"], literal=train).rope_scaling.factor == 2
    )
    with pytest.raises(ConfigError) as err:  # vLLM would load the directory unscaled
        load_config(
            EvalConfig,
            None,
            ["rope_scaling={type: linear, factor: 2}", "engine={kind: vllm}"],
            literal={"suites": ["x"], "out": "o"},
        )
    assert_one_line(str(err.value), "rope_scaling", "vllm", "temper model rope")


def test_load_model_applies_rope_scaling_as_scale_rope_does(tmp_path):
    from transformers import AutoModelForCausalLM

    from tempering.models.load import load_model

    tiny_llama().save_pretrained(tmp_path)
    yarn = RopeScaling(type="yarn", factor=2.0)
    ids = torch.randint(3, 64, (1, 900), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loaded = load_model(str(tmp_path), rope_scaling=yarn).eval()(ids).logits
        direct = scale_rope(AutoModelForCausalLM.from_pretrained(tmp_path), yarn).eval()(ids).logits
        plain = load_model(str(tmp_path)).eval()(ids).logits
    assert torch.allclose(loaded, direct, atol=1e-6, rtol=0)
    assert (plain - direct).abs().max() > 1e-4  # without the key: the model as saved


def test_scaled_window_is_the_window_scale_rope_gives_without_touching_the_config():
    from tempering.models.rope import scaled_window

    config = tiny_llama().config  # native 512
    assert scaled_window(config, None) == 512
    assert scaled_window(config, RopeScaling(type="yarn", factor=2.0)) == 1024
    assert scaled_window(config, RopeScaling(type="dynamic", factor=3.0)) == 1536
    assert scaled_window(config, RopeScaling(type="linear", factor=2.0, original_max_position_embeddings=256)) == 512
    assert config.max_position_embeddings == 512 and rope_summary(config) is None


def test_longctx_lengths_are_checked_against_the_scaled_window(tmp_path):
    from tempering.config.longctx import longctx_settings
    from tempering.sources.longctx import check_requests

    tiny_llama().save_pretrained(tmp_path)
    settings = {"lengths": [768], "model": str(tmp_path)}
    with pytest.raises(ValueError) as err:
        check_requests(["passkey"], longctx_settings(settings))
    assert_one_line(str(err.value), "768", "window of 512")
    check_requests(["passkey"], longctx_settings({**settings, "rope_scaling": {"type": "yarn", "factor": 2}}))


def test_the_dpo_reference_cache_tells_a_scaled_model_from_its_original(smol_tokenizer):
    from tempering.train.reference import reference_key

    model = tiny_llama()
    before = reference_key(model, smol_tokenizer, [], "fp32")
    assert reference_key(scale_rope(model, RopeScaling(type="yarn", factor=2.0)), smol_tokenizer, [], "fp32") != before
