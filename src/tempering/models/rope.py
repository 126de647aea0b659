"""RoPE scaling applied to a loaded model, through transformers' own rope parameters.

Nothing here computes frequencies: the config's `rope_parameters` (the `rope_scaling` of older
releases) name the scheme, and transformers' rotary embedding builds them, so an exported
directory loads the same scaled model in plain transformers and in vLLM.

  scale_rope       validate, write the parameters into the config, rebuild the rotary embedding
  context_window   the longest sequence a model (with its scaling) supports
  scaled_window    the window once a scaling applies, from the config alone (longctx length checks)
  rope_summary     the scaling a model carries, as recorded in lineage and eval cache keys
  record_scaling   write the scaling applied at load beside a saved LoRA adapter (`ROPE_RECORD`)
  recorded_scaling read it back, so loading the adapter re-applies it to its unscaled base
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tempering.atomic import write_text_atomic
from tempering.config.longctx import RopeScaling
from tempering.errors import UserError

ROPE_RECORD = "tempering_rope_scaling.json"
"""Beside a LoRA adapter trained under `rope_scaling` (or a checkpoint rebuilt into a model dir):
its base (config) is unscaled, so the scaling is written here and `models.load.load_model`
re-applies it. A saved full model's config.json carries the scaled `rope_parameters` itself."""


class RopeScalingError(UserError):
    """A scaling that cannot apply to this model; the message is one line naming the field."""


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def per_layer_type(params: Any) -> bool:
    """Whether rope parameters are kept per attention type (Gemma 3: `{"full_attention": {...},
    "sliding_attention": {...}}`, each with its own theta) rather than one set for every layer."""
    return bool(params) and all(isinstance(v, dict) for v in params.values())


def rope_summary(config: Any) -> dict[str, Any] | None:
    """The non-default rope parameters of a transformers config (None: plain RoPE or no RoPE); for
    parameters kept per attention type, those of the scaled types, by type."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if params and per_layer_type(params):
        scaled = {kind: dict(p) for kind, p in params.items() if p.get("rope_type", "default") != "default"}
        return scaled or None
    if not params or params.get("rope_type", params.get("type", "default")) == "default":
        return None
    return dict(params)


def context_window(config: Any) -> int:
    """Tokens a model with `config` supports: `max_position_embeddings`, which linear and YaRN
    scaling raise to the scaled window; dynamic NTK keeps the native one there (transformers grows
    the base from it as sequences pass it), so its window is native x factor."""
    summary = rope_summary(config) or {}
    if summary.get("rope_type") == "dynamic":
        return int(config.max_position_embeddings * summary["factor"])
    return int(config.max_position_embeddings)


def scale_rope(model: Any, scaling: RopeScaling) -> Any:
    """Stretch `model`'s RoPE by `scaling` in place (config and rotary embedding); returns `model`.

    The config's `max_position_embeddings` becomes native x factor (linear, YaRN), so length
    checks and an exported `config.json` both see the new window (`context_window`).

    Raises:
        RopeScalingError: the model has no RoPE, is already scaled, or the native window is inconsistent.
    """
    base = _base(model)
    config, decoder = base.config, base.get_decoder()
    rotary = getattr(decoder, "rotary_emb", None)
    if rotary is None or getattr(config, "rope_parameters", None) is None:
        raise RopeScalingError(f"rope_scaling: {config.model_type} models have no rotary embedding to scale")
    scale_config(config, scaling)
    decoder.rotary_emb = type(rotary)(config=config).to(rotary.inv_freq.device)
    base.tempering_rope_scaling = scaling  # what `record_scaling` writes beside a saved adapter
    return model


def scaled_window(config: Any, scaling: RopeScaling | None) -> int:
    """The window a model with `config` has once `scaling` applies (no weights loaded; `config` untouched).

    Raises:
        RopeScalingError: as `scale_rope`.
    """
    return context_window(config if scaling is None else scale_config(copy.deepcopy(config), scaling))


def scale_config(config: Any, scaling: RopeScaling) -> Any:
    """Write `scaling` into a transformers `config` (rope parameters and window); returns `config`.

    Raises:
        RopeScalingError: the config is already scaled, or the native window is inconsistent.
    """
    if rope_summary(config) is not None:
        raise RopeScalingError(
            f"rope_scaling: the model is already scaled ({rope_summary(config)}); scale its unscaled original"
        )
    if per_layer_type(getattr(config, "rope_parameters", None)):
        raise RopeScalingError(
            f"rope_scaling: {config.model_type} models keep RoPE per attention type "
            f"({', '.join(config.rope_parameters)}), which scaling does not support yet; remove rope_scaling"
        )
    native = int(config.max_position_embeddings)
    original = scaling.original_max_position_embeddings or native
    if scaling.type == "dynamic" and original != native:
        raise RopeScalingError(
            f"rope_scaling.original_max_position_embeddings: dynamic scaling grows from the model's own window ({native}), not {original}"
        )
    if original > native:
        raise RopeScalingError(
            f"rope_scaling.original_max_position_embeddings: {original} exceeds the model's own window ({native})"
        )
    params = {"rope_type": scaling.type, "factor": float(scaling.factor), "rope_theta": _theta(config)}
    if scaling.type == "yarn":
        params["original_max_position_embeddings"] = original
        params |= {
            k: getattr(scaling, k) for k in ("beta_fast", "beta_slow", "attention_factor") if getattr(scaling, k)
        }
    config.rope_parameters = params
    if scaling.type != "dynamic":  # dynamic NTK reads the native window from this field
        config.max_position_embeddings = int(original * scaling.factor)
    config.validate_rope()
    return config


def record_scaling(model: Any, path: str | Path) -> None:
    """Write the scaling `scale_rope` applied to `model` into the adapter dir `path` (nothing for a
    full model, whose config.json carries it, nor for a model scaled on disk before it loaded)."""
    applied = next((m.tempering_rope_scaling for m in model.modules() if hasattr(m, "tempering_rope_scaling")), None)
    if applied is not None and (Path(path) / "adapter_config.json").is_file():
        write_record(applied, path)


def write_record(scaling: RopeScaling, path: str | Path) -> None:
    """`scaling` as the record of the adapter dir `path`."""
    write_text_atomic(Path(path) / ROPE_RECORD, json.dumps(scaling.model_dump(exclude_none=True)))


def recorded_scaling(path: str | Path) -> RopeScaling | None:
    """The scaling recorded beside the adapter in `path` (None: none recorded)."""
    file = Path(path) / ROPE_RECORD
    return RopeScaling.model_validate_json(file.read_text()) if file.is_file() else None


def _theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10_000.0)))
