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


def test_export_merges_an_adapter_over_a_vlm_with_its_trained_projector(tmp_path):
    """A stage-2 vision adapter (LoRA on the language model, the projector trained in full) exports
    as one VLM directory: the merged model's logits on an image prompt equal the adapter's."""
    from PIL import Image

    from tempering.models.vlm import load_vlm, save_vlm
    from tempering.recipes.vision import vlm_for_training
    from tests.conftest import tiny_vlm

    base = save_vlm(*tiny_vlm(), tmp_path / "vlm")
    model, _ = vlm_for_training(str(base), LoraSettings(r=2, alpha=4), {"projector"})
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # LoRA B starts at 0 and the projector copy equals the base: move both
                p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "adapter")
    _, processor = load_vlm(str(base))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = Image.new("RGB", (32, 32), (200, 40, 40))
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    adapter, _ = load_vlm(str(tmp_path / "adapter"))
    out = export_merged(str(tmp_path / "adapter"), str(tmp_path / "merged"))
    merged, merged_processor = load_vlm(str(out))
    assert not hasattr(merged, "peft_config") and merged_processor.image_token == processor.image_token
    plain, _ = load_vlm(str(base))
    with torch.no_grad():
        want = adapter.eval()(**inputs).logits
        got = merged.eval()(**inputs).logits
        before = plain.eval()(**inputs).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert (got - before).abs().max() > 1e-3  # the merge carries the adapter and the projector
