"""Gemma 3 on a tiny random model (no package needed): what works is shown working, what does not
is refused in one line; the built-in alias's packaging with a stand-in package."""

import dataclasses
import sys

import pytest
import torch

from tempering.config import LoraSettings, RopeScaling
from tempering.errors import UserError
from tempering.models import builtin
from tempering.models.builtin import ALIASES, TEMPLATES, ModelNotFound, alias_gguf
from tempering.models.llama_decode import unsupported_reason
from tempering.models.load import resolve_model
from tempering.models.logprobs import head_logprobs, output_head, token_logprobs
from tempering.models.lora import apply_lora, linear_targets
from tempering.models.rope import RopeScalingError, rope_summary, scale_rope
from tests.conftest import tiny_gemma, word_tokenizer

GEMMA_TEMPLATE = (TEMPLATES / "gemma.jinja").read_text()


# --- the chat template: Gemma's turn format, written out by hand ---


def test_gemma_template_renders_gemma_turns():
    tok = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>"], GEMMA_TEMPLATE)
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " What is 2+2? "},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        "<s><start_of_turn>user\nBe brief.\n\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma_template_keeps_tool_results_and_lets_tempering_write_the_calls():
    """Gemma has no tool role: a result is a user turn in <tool_response>; the calls themselves the
    template drops, so Tempering writes them into the reply (`detect_tool_call_style`)."""
    from tempering.data.render import detect_tool_call_style

    tok = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>"], GEMMA_TEMPLATE)
    chat = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [{"name": "w", "arguments": {}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    assert tok.apply_chat_template(chat, tokenize=False) == (
        "<s><start_of_turn>user\nWeather?<end_of_turn>\n<start_of_turn>model\nLooking.<end_of_turn>\n"
        "<start_of_turn>user\n<tool_response>\nsunny\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\nSunny.<end_of_turn>\n"
    )
    assert detect_tool_call_style(tok) == "tempering"


def test_the_gemma_alias_gets_the_template_and_ends_turns_at_end_of_turn():
    tok = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>", "<start_of_turn>", "<end_of_turn>"], "")
    tok.chat_template = None  # a base model's GGUF carries none
    builtin.prepare_tokenizer("gemma-3-270m", tok)
    assert tok.chat_template == GEMMA_TEMPLATE
    assert tok.eos_token == "<end_of_turn>" and tok.eos_token_id == 5
    assert builtin.end_of_turn_ids("gemma-3-270m", tok, gguf_eos=2) == [2, 5]
    own = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>"], "{{ messages }}")
    assert builtin.prepare_tokenizer("smollm2-135m-instruct", own).chat_template == "{{ messages }}"
    assert builtin.end_of_turn_ids("smollm2-135m-instruct", own, gguf_eos=2) is None


# --- the alias's package: missing, or split in chunks reassembled once ---


def test_a_missing_gemma_package_is_one_line_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path))
    absent = dataclasses.replace(ALIASES["gemma-3-270m"], package="gemma3_270m_absent_for_this_test")
    monkeypatch.setitem(ALIASES, "gemma-3-270m", absent)
    with pytest.raises(ModelNotFound) as info:
        resolve_model("gemma-3-270m")
    assert "\n" not in str(info.value) and "make models-extra" in str(info.value)


def _chunk_package(tmp_path, monkeypatch, chunks_present=True):
    """A stand-in for the chunked package: `assemble` writes a marker and counts its calls."""
    pkg = tmp_path / "site" / "fake_chunked_gguf"
    pkg.mkdir(parents=True)
    pkg.joinpath("__init__.py").write_text(
        "from pathlib import Path\n"
        "calls = []\n"
        "def verify_chunks():\n"
        f"    if not {chunks_present}:\n"
        "        raise FileNotFoundError('Missing chunk files: part02')\n"
        "def assemble(output_path, overwrite=False):\n"
        "    calls.append(output_path)\n"
        "    Path(output_path).write_bytes(b'GGUF joined')\n"
        "    return Path(output_path)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "fake_chunked_gguf", raising=False)
    model = dataclasses.replace(ALIASES["gemma-3-270m"], package="fake_chunked_gguf", filename="m.gguf")
    monkeypatch.setitem(ALIASES, "gemma-3-270m", model)


def test_a_chunked_gguf_is_reassembled_once_into_the_cache(tmp_path, monkeypatch):
    _chunk_package(tmp_path, monkeypatch)
    first = alias_gguf("gemma-3-270m", tmp_path / "cache")
    assert first == tmp_path / "cache" / "gguf" / "m.gguf" and first.read_bytes() == b"GGUF joined"
    assert alias_gguf("gemma-3-270m", tmp_path / "cache") == first
    assert len(sys.modules["fake_chunked_gguf"].calls) == 1  # the second call found it
    assert [p.name for p in first.parent.iterdir()] == ["m.gguf"]  # no partial file left


def test_a_missing_chunk_is_one_line_naming_the_reinstall(tmp_path, monkeypatch):
    _chunk_package(tmp_path, monkeypatch, chunks_present=False)
    with pytest.raises(ModelNotFound, match=r"part02; reinstall with make models-extra"):
        alias_gguf("gemma-3-270m", tmp_path / "cache")


# --- the model: LoRA targets, log-probs, and the refusals ---


def test_lora_all_linear_finds_gemma_projections_and_trains_only_them():
    model = tiny_gemma(vocab=64)
    assert linear_targets(model) == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8), "unused-base")
    trainable = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable == {"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}


def test_chunked_log_probs_equal_one_shot_and_the_model_forward_fp32():
    model = tiny_gemma(vocab=97, seed=1).eval()
    ids = torch.randint(3, 97, (2, 13))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
        head = output_head(model)
        chunked, _ = head_logprobs(head, hidden, ids[:, 1:], mask[:, 1:], chunk_tokens=5)
        whole, _ = head_logprobs(head, hidden, ids[:, 1:], mask[:, 1:], chunk_tokens=None)
        forward = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), -1)
        via_forward = forward.gather(2, ids[:, 1:, None]).squeeze(2)
        assert torch.allclose(chunked, whole, atol=1e-6, rtol=0)
        assert torch.allclose(whole, via_forward, atol=1e-5)  # embedding scale, norms: the model's own
        assert torch.allclose(token_logprobs(model, ids, mask, mask)[0][:, 1:], via_forward, atol=1e-5)


def test_a_wide_head_takes_fewer_positions_a_chunk(monkeypatch):
    from tempering.models import logprobs

    assert logprobs.chunk_positions(1024, 49152) == 1024  # the default model's chunk: unchanged
    assert logprobs.chunk_positions(1024, 262144) == 192  # Gemma 3's: no more logits than that
    assert logprobs.chunk_positions(None, 262144) is None and logprobs.chunk_positions(7, None) == 7
    monkeypatch.setattr(logprobs, "LOGPROB_CHUNK_LOGITS", 97 * 5)  # 5 positions of a 97-row head
    model = tiny_gemma(vocab=97, seed=2).eval()
    ids = torch.randint(3, 97, (2, 13))
    mask = torch.ones_like(ids[:, 1:])
    head, rows = output_head(model), []
    head.register_forward_hook(lambda module, inputs, out: rows.append(out.shape[0]))
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
        chunked, _ = head_logprobs(head, hidden, ids[:, 1:], mask)
        assert rows == [5, 5, 5, 5, 4]  # 24 scored positions
        whole, _ = head_logprobs(head, hidden, ids[:, 1:], mask, chunk_tokens=None)
        assert torch.allclose(chunked, whole, atol=1e-6, rtol=0)


def test_logit_softcapping_is_refused_in_one_line():
    model = tiny_gemma(vocab=64, final_logit_softcapping=30.0)
    ids = torch.randint(3, 64, (1, 6))
    with pytest.raises(UserError, match=r"^final_logit_softcapping: 30.0 \(gemma3_text\) caps logits") as info:
        token_logprobs(model, ids, torch.ones_like(ids), torch.ones_like(ids))
    assert "\n" not in str(info.value)


def test_rope_scaling_is_refused_for_per_layer_type_rope_and_the_native_rope_is_unscaled():
    model = tiny_gemma(vocab=64)
    assert set(model.config.rope_parameters) == {"full_attention", "sliding_attention"}
    assert rope_summary(model.config) is None  # two default RoPEs (10k local, 1M global): nothing scaled
    with pytest.raises(RopeScalingError, match=r"gemma3_text models keep RoPE per attention type"):
        scale_rope(model, RopeScaling(type="linear", factor=2.0))


def test_the_single_stream_step_declines_gemma_with_its_reason():
    assert unsupported_reason(tiny_gemma(vocab=64)) == "model type 'gemma3_text' is not 'llama'"
