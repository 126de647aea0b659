"""Saved adapters load with plain PEFT; exports choose their dtype."""

import json

import torch

from tempering.config import LoraSettings
from tempering.models.lora import apply_lora, export_merged
from tests.conftest import tiny_llama


def test_adapter_on_an_alias_loads_with_plain_peft(tmp_path, monkeypatch, smol_tokenizer):
    """The alias's converted dir is what adapter_config.json names, not the alias (a hub miss)."""
    from peft import AutoPeftModelForCausalLM

    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "cache" / "models" / "smollm2-135m-instruct"  # as if converted once
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(base)
    smol_tokenizer.save_pretrained(base)
    model = apply_lora(
        tiny_llama(vocab=len(smol_tokenizer), tie=True), LoraSettings(r=2, alpha=4), "smollm2-135m-instruct"
    )
    model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    recorded = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(base.resolve())
    monkeypatch.chdir(tmp_path / "cache")  # any working directory
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "adapter"))
    assert any("lora_A" in n for n, _ in loaded.named_parameters())


def test_adapter_on_a_relative_dir_records_an_absolute_path(tmp_path, monkeypatch, smol_tokenizer):
    monkeypatch.chdir(tmp_path)
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(tmp_path / "base")
    model = apply_lora(tiny_llama(vocab=len(smol_tokenizer), tie=True), LoraSettings(r=2, alpha=4), "base")
    assert model.peft_config["default"].base_model_name_or_path == str((tmp_path / "base").resolve())
    assert (
        apply_lora(tiny_llama(vocab=64), LoraSettings(r=2, alpha=4), "org/hub-model")
        .peft_config["default"]
        .base_model_name_or_path
        == "org/hub-model"
    )


def test_export_dtype(tmp_path, smol_tokenizer):
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(tmp_path / "base")
    smol_tokenizer.save_pretrained(tmp_path / "base")
    model = apply_lora(
        tiny_llama(vocab=len(smol_tokenizer), tie=True), LoraSettings(r=2, alpha=4), str(tmp_path / "base")
    )
    model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)
    for dtype, torch_dtype in (("fp16", torch.float16), ("fp32", torch.float32)):
        out = export_merged(str(tmp_path / "adapter"), str(tmp_path / dtype), dtype)
        from safetensors.torch import load_file

        assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch_dtype}
