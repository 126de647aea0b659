"""The real `gemma-3-270m` (skipped unless `make models-extra` installed its package): converted once
with Gemma's turn format and its terms beside it; the base model continues text sensibly."""

import json
from pathlib import Path

import pytest

from tempering.config import SamplingParams
from tempering.data.render import IGNORE, render_with_mask
from tempering.models.builtin import copy_terms, terms_notice
from tempering.models.load import load_model, load_tokenizer, resolve_model

pytestmark = pytest.mark.needs_gemma


@pytest.fixture(scope="module")
def gemma_tokenizer():
    return load_tokenizer("gemma-3-270m")


def test_the_alias_converts_into_a_gemma3_dir_with_its_terms():
    path = Path(resolve_model("gemma-3-270m"))
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["vocab_size"] == 262144
    assert config["layer_types"][:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert "quantization_config" not in config
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == [1, 106]
    assert "Gemma" in (path / "GEMMA_TERMS.html").read_text()


def test_the_terms_are_copied_and_named_in_one_line(tmp_path):
    copied = copy_terms("gemma-3-270m", tmp_path)
    assert copied == tmp_path / "GEMMA_TERMS.html" and "Gemma Terms of Use" in copied.read_text()
    line = terms_notice("gemma-3-270m", copied)
    assert "\n" not in line and line.endswith(f"the Gemma Terms of Use: {copied}")


def test_chat_rows_render_as_gemma_turns_token_by_token(gemma_tokenizer):
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]
    ex = render_with_mask(gemma_tokenizer, chat, "tempering")
    tokens = gemma_tokenizer.convert_ids_to_tokens(ex.input_ids)
    assert tokens == [
        "<bos>",
        "<start_of_turn>",
        "user",
        "\n",
        "Be",
        "▁brief",
        ".",
        "\n\n",
        "Hi",
        "<end_of_turn>",
        "\n",
        "<start_of_turn>",
        "model",
        "\n",
        "Hello",
        "!",
        "<end_of_turn>",
        "\n",
    ]
    # the loss covers the reply through its end of turn, not the newline after it
    trained = [t for t, label in zip(tokens, ex.labels) if label != IGNORE]
    assert trained == ["Hello", "!", "<end_of_turn>"]
    assert gemma_tokenizer.eos_token == "<end_of_turn>"


@pytest.mark.slow
def test_the_base_model_continues_text_sensibly_and_engines_agree_with_generate(gemma_tokenizer):
    """Greedy continuations name Paris and France (measured: "The capital of France is" alone goes on
    " the capital of the country of France.", " Paris" third at -2.5, so the prompt names a city),
    and the batching engine's tokens are transformers' `generate`'s (fp32)."""
    import torch

    from tempering.rollout.batching_engine import BatchingEngine

    model = load_model("gemma-3-270m").eval()
    engine = BatchingEngine(model, gemma_tokenizer, precision="fp32", max_slots=2)
    texts = ("The capital of France is the city of", "Paris is the capital of")
    prompts = [gemma_tokenizer.encode(t) for t in texts]
    assert all(p[0] == gemma_tokenizer.bos_token_id for p in prompts)
    got = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=8))
    assert got[0][0].text.startswith(" Paris") and got[1][0].text.startswith(" France")
    for prompt, (completion,) in zip(prompts, got):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=8)[0, len(prompt) :]
        assert completion.token_ids == ref.tolist()[: len(completion.token_ids)]
