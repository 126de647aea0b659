"""LoRA through peft: attach adapters, and merge them into a standalone model."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterable

from tempering.config import LoraSettings, RopeScaling
from tempering.errors import UserError


def apply_lora(model: Any, settings: LoraSettings, base_spec: str, modules_to_save: list[str] | None = None) -> Any:
    """Wrap `model` with trainable LoRA adapters; the base weights are frozen (the modules named
    in `modules_to_save` are trained in full and saved with the adapter: a VLM's projector).

    adapter_config.json records the base as something plain `peft` can load: the local
    directory `base_spec` resolves to (absolute, so the adapter loads from any working
    directory), or the hub id as given. An alias would send PEFT to the hub.
    """
    from peft import LoraConfig, get_peft_model

    layers, targets = None, settings.target_modules
    if settings.last_layers:
        total = model.config.num_hidden_layers
        layers = list(range(max(0, total - settings.last_layers), total))
        if isinstance(targets, str):  # peft needs names with layers_to_transform
            targets = linear_targets(model) if targets == "all-linear" else [targets]
    if settings.base == "int8":
        from tempering.models.quantize import int8_base_in_place

        if targets == "all-linear":  # PEFT resolves it by torch.nn.Linear: name them before the swap
            targets = linear_targets(model)
        int8_base_in_place(model)
    config = LoraConfig(
        target_parameters=_expert_parameters(model) if settings.experts else None,
        layers_to_transform=layers,
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        modules_to_save=modules_to_save,
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        if settings.base == "int8":  # PEFT's custom-module API; it warns that the base type is not its own
            warnings.filterwarnings("ignore", "Unsupported layer type", UserWarning)
            config._register_custom_module({_int8_type(): _int8_lora_type()})
        peft_model = get_peft_model(model, config)
    peft_model.peft_config["default"].base_model_name_or_path = loadable_base(base_spec)
    return peft_model


def _int8_type() -> type:
    from tempering.models.quantize import Int8WeightLinear

    return Int8WeightLinear


def _int8_lora_type() -> type:
    """PEFT's LoRA Linear over an `Int8WeightLinear` base (PEFT's custom-module API): the adapter
    adds B A x to the int8 layer's output; merging into int8 weights is refused by PEFT's own check
    (no float `weight` to add to): export merges into a float copy of the base instead."""
    from peft.tuners.lora.layer import Linear

    return Linear


def _expert_parameters(model: Any) -> list[str]:
    """Short names (`mlp.experts.gate_up_proj`) of the experts' stacked weight tensors."""
    names = sorted(
        {
            f"{module_name.split('.layers.')[-1].split('.', 1)[-1]}.{param}"
            for module_name, module in model.named_modules()
            if type(module).__name__.endswith("Experts") and ".layers." in module_name
            for param, _ in module.named_parameters(recurse=False)
        }
    )
    if not names:
        raise UserError("lora.experts: the model has no experts (a dense model); remove lora.experts")
    return names


def loadable_base(spec: str) -> str:
    """`spec` as `from_pretrained` takes it: an absolute local dir, else the hub id."""
    from tempering.models.load import ALIASES, resolve_model

    # The model was loaded from `spec` already: only aliases and local paths need resolving
    # (a hub id is kept as given, without asking the hub again).
    local = Path(resolve_model(spec) if spec in ALIASES else spec).expanduser()
    return str(local.resolve()) if local.is_dir() else spec


def load_for_training(model_spec: str, lora: LoraSettings | None, rope_scaling: RopeScaling | None = None) -> Any:
    """The model to train: LoRA on top of the base, or all parameters, its RoPE scaled by
    `rope_scaling` at load (`load_model`).

    Starting from a PEFT adapter dir: with LoRA, training continues that adapter (its own
    rank and targets); with full parameters, the adapter is merged in first.
    """
    from tempering.models.load import adapter_base, load_model, resolve_model

    if adapter_base(resolve_model(model_spec)):
        model = load_model(model_spec, trainable_adapter=lora is not None, rope_scaling=rope_scaling)
        if lora is None:
            model = model.merge_and_unload()
            model.requires_grad_(True)
        else:
            _console().print("[dim]continuing the given LoRA adapter (its own r/alpha/targets apply)[/dim]")
        return model
    model = load_model(model_spec, rope_scaling=rope_scaling)
    return apply_lora(model, lora, model_spec) if lora else model


def continues_adapter(model: Any) -> bool:
    """Whether `model`'s LoRA adapters already change its output (a given adapter continued, any
    `lora_B` non-zero): then "adapters off" is the base, not the policy training starts from.
    A fresh adapter (B = 0) adds exactly nothing."""
    return any("lora_B" in name and bool(p.detach().any()) for name, p in model.named_parameters())


def check_kl_reference(model: Any, beta: float, key: str) -> None:
    """A KL penalty's reference is the base with adapters off: refuse it, before any work, when the
    adapter being trained was given and already changes the model (`key`: the config key of beta)."""
    if beta > 0 and continues_adapter(model):
        raise UserError(
            f"{key} > 0 penalises the distance to the base (adapters off), but the model is an adapter that "
            f"already changes it: export it merged (`temper export`) and start from that, or set {key}: 0"
        )


def _console() -> Any:
    from rich.console import Console  # models/ stays below train/: no import of its console

    return Console(stderr=True)


LORA_PARTS = ("attn", "mlp", "unembed")
"""What `linear_targets` can adapt: the decoder blocks' attention and MLP Linears, the LM head."""
ALL_LINEAR = ("attn", "mlp")
"""The parts "all-linear" means: every Linear inside the decoder blocks, the head excluded."""


def linear_targets(model: Any, parts: Iterable[str] = ALL_LINEAR) -> list[str]:
    """Short names of the Linear layers (int8 ones too) LoRA adapts in `parts` (`LORA_PARTS`): `attn`,
    the decoder blocks' Linears under an attention module (a name with "attn" or "attention"); `mlp`,
    the blocks' other Linears; `unembed`, the LM head. `ALL_LINEAR` is what "all-linear" means; the
    Tinker service maps its `train_attn` / `train_mlp` / `train_unembed` onto `parts` here.
    """
    import torch

    parts = set(parts)
    if parts - set(LORA_PARTS):
        raise ValueError(f"LoRA parts {sorted(parts - set(LORA_PARTS))} are not among {LORA_PARTS}")
    head, linear = model.get_output_embeddings(), (torch.nn.Linear, _int8_type())
    names = set()
    for name, m in model.named_modules():
        if not isinstance(m, linear):
            continue
        if m is head:
            part = "unembed"
        elif ".layers." in name:
            part = "attn" if "attn" in name or "attention" in name else "mlp"
        else:
            continue
        if part in parts:
            names.add(name.rsplit(".", 1)[-1])
    return sorted(names)


EXPORT_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def export_merged(adapter_dir: str, out_dir: str, dtype: str = "fp32") -> Path:
    """Merge a PEFT adapter into its base and save a standalone HF directory in `dtype`.

    The merge runs in `dtype` (bf16/fp16 halve the file; fp32 keeps the trained numbers). An
    adapter over a vision-language model merges into it (parts trained in full, such as the
    projector, come from the adapter) and saves with its processor.
    """
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.vlm import is_vlm, load_vlm, save_vlm

    out = Path(out_dir)
    if is_vlm(adapter_dir):
        model, processor = load_vlm(adapter_dir, dtype=EXPORT_DTYPES[dtype])
        return save_vlm(model.merge_and_unload(), processor, out)
    model = load_model(adapter_dir, dtype=EXPORT_DTYPES[dtype])
    merged = model.merge_and_unload()
    merged.save_pretrained(out)
    load_tokenizer(adapter_dir).save_pretrained(out)
    return out
