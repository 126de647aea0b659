"""Model specs resolve offline; the default converts to a trainable HF dir; LoRA exports merge."""

import json
from pathlib import Path

import pytest
import torch

from tempering.config import LoraSettings
from tempering.models.load import ModelNotFound, alias_gguf, load_model, resolve_model
from tempering.models.lora import apply_lora, export_merged
from tests.conftest import tiny_llama


def test_default_alias_resolves_to_a_converted_hf_dir():
    path = Path(resolve_model("smollm2-135m-instruct"))
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert (path / "tokenizer.json").is_file() and (path / "chat_template.jinja").is_file()
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # re-saved as plain weights: trainable
    assert alias_gguf("smollm2-135m-instruct").suffix == ".gguf"


def test_missing_paths_fail_clearly(tmp_path):
    with pytest.raises(ModelNotFound, match="GGUF file not found"):
        resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelNotFound, match="without config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelNotFound, match="not found"):
        resolve_model("./no/such/dir")


def test_hub_ids_pass_through_only_when_loadable_here(tmp_path, monkeypatch):
    """Offline, a hub id not in the local hub cache is unknown (one line, not a connection
    traceback from from_pretrained); a cached one passes through to from_pretrained."""
    import huggingface_hub.constants as hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFound, match=r"unknown model 'someorg/some-model'.*offline"):
        resolve_model("someorg/some-model")
    repo = tmp_path / "models--someorg--some-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    assert resolve_model("someorg/some-model") == "someorg/some-model"


def test_lora_adapter_saves_in_peft_format_and_export_merges(tmp_path, smol_tokenizer):
    base_dir = tmp_path / "base"
    tiny_llama(vocab=len(smol_tokenizer)).save_pretrained(base_dir)
    smol_tokenizer.save_pretrained(base_dir)
    model = apply_lora(load_model(str(base_dir)), LoraSettings(r=4, alpha=8), str(base_dir))
    with torch.no_grad():  # give the adapter non-zero weights so merging matters
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05)
    adapter_dir = tmp_path / "adapter"
    model.save_pretrained(adapter_dir)
    assert (adapter_dir / "adapter_config.json").is_file() and (adapter_dir / "adapter_model.safetensors").is_file()
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)

    merged_dir = export_merged(str(adapter_dir), str(tmp_path / "merged"))
    merged = load_model(str(merged_dir)).eval()
    adapted = load_model(str(adapter_dir)).eval()
    ids = torch.randint(3, 1000, (1, 16))
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted(ids).logits, atol=1e-4)
        plain = load_model(str(base_dir)).eval()
        assert not torch.allclose(plain(ids).logits, adapted(ids).logits, atol=1e-4)
    assert not (merged_dir / "adapter_config.json").exists()


@pytest.mark.slow
def test_a_gguf_path_converts_into_a_trainable_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    path = Path(resolve_model(str(alias_gguf("smollm2-135m-instruct"))))
    assert path.parent == tmp_path / "cache" / "models" and path.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    model = load_model(str(path))
    assert getattr(model, "hf_quantizer", None) is None
    assert all(p.requires_grad for p in model.parameters())
    assert resolve_model(str(alias_gguf("smollm2-135m-instruct"))) == str(path)  # converted once
