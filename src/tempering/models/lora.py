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

    layers, targets = None, settings.target_modules
    if settings.last_layers:
        total = model.config.num_hidden_layers
        layers = list(range(max(0, total - settings.last_layers), total))
        if isinstance(targets, str):  # peft needs names with layers_to_transform
            targets = _linear_names(model) if targets == "all-linear" else [targets]
    config = LoraConfig(
        layers_to_transform=layers,
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    peft_model.peft_config["default"].base_model_name_or_path = base_spec
    return peft_model


def _linear_names(model: Any) -> list[str]:
    """Short names of the Linear layers inside the decoder blocks (what "all-linear" means)."""
    import torch

    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and m is not head and ".layers." in name})


def export_merged(adapter_dir: str, out_dir: str) -> Path:
    """Merge a PEFT adapter into its base and save a standalone HF directory."""
    from tempering.models.load import load_model, load_tokenizer

    model = load_model(adapter_dir)
    merged = model.merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    load_tokenizer(adapter_dir).save_pretrained(out)
    return out
