"""LoRA through peft: attach adapters, and merge them into a standalone model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tempering.config import LoraSettings


def apply_lora(model: Any, settings: LoraSettings, base_spec: str) -> Any:
    """Wrap `model` with trainable LoRA adapters; the base weights are frozen.

    `base_spec` (e.g. the alias) is recorded in adapter_config.json so the adapter
    resolves its base on any machine, not only where this cache path exists.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    peft_model.peft_config["default"].base_model_name_or_path = base_spec
    return peft_model


def export_merged(adapter_dir: str, out_dir: str) -> Path:
    """Merge a PEFT adapter into its base and save a standalone HF directory."""
    from tempering.models.load import load_model, load_tokenizer

    model = load_model(adapter_dir)
    merged = model.merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    load_tokenizer(adapter_dir).save_pretrained(out)
    return out
