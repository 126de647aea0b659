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
