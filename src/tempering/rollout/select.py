"""Which `Engine` a run samples with, chosen by its config (`EngineSettings.kind`): the one
place engines are built (`tests/test_one_place.py` fails on a construction elsewhere).

  engine = build_engine(cfg.engine, model, tokenizer, precision, model_dir=resolve_model(cfg.model))
  engine = load_engine(cfg.engine, cfg.model, cfg.precision)   # loads the model spec first

* batching (default): `BatchingEngine`, continuous batching over the model in this process;
* hf: `HFEngine`, the static-batch engine (one batch per call, finished rows dropped);
* speculative: `SpeculativeEngine` over the model, its draft (`engine.draft`) a loaded model
  (`ModelDrafter`) or prompt lookup; the target's outputs and identity, faster;
* vllm: `VLLMEngine` on a CUDA GPU; the trainer's model is kept for the sync probe.
  Without vLLM or a GPU this raises `EngineUnavailable` with the reason, before any
  model is handed to it.

A vision-language model (a directory with a processor: `models.vlm.is_vlm`) is sampled by
`HFEngine` with its processor whatever the kind: the batching and speculative engines take no
image inputs yet, so they fall back to it (said on the console); vLLM for VLMs is not wired yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tempering.config import DraftSettings, EngineSettings
from tempering.errors import UserError
from tempering.rollout.engine import Engine, HFEngine
from tempering.rollout.vllm_engine import EngineUnavailable, vllm_unavailable

__all__ = ["EngineUnavailable", "build_drafter", "build_engine", "check_engine", "load_engine", "load_target"]


def check_engine(settings: EngineSettings) -> None:
    """Raise `EngineUnavailable` now if `settings` name an engine this host cannot run, a
    `UserError` for `cuda_graphs: on` without a CUDA device (called where a run starts, so a
    misconfigured run fails before loading a model)."""
    if settings.kind == "vllm":
        reason = vllm_unavailable()
        if reason:
            raise EngineUnavailable(reason)
    if settings.kind == "batching" and settings.cuda_graphs == "on":
        from tempering.models.precision import default_device
        from tempering.rollout.graphs import cuda_graphs_off

        cuda_graphs_off("on", default_device())  # a UserError where torch sees no CUDA device


def build_engine(
    settings: EngineSettings,
    model: Any,
    tokenizer: Any,
    precision: str,
    model_dir: str | None = None,
    *,
    max_len: int | None = None,
    processor: Any = None,
) -> Engine:
    """The engine `settings` name, over `model` (in-process engines) or `model_dir` (vLLM).

    Args:
        max_len: batching: the longest prompt + completion a served request may use (None: the
            engine's 2048; a `generate` call sizes its slots from its own requests).
        processor: a vision-language model's processor: then `HFEngine`, which takes image prompts.
    Raises:
        EngineUnavailable: kind vllm where vLLM or a GPU is absent, or without a model_dir.
    """
    check_engine(settings)
    if processor is not None:
        if settings.kind == "vllm":
            raise EngineUnavailable("engine kind 'vllm' does not take image prompts here yet; use kind hf")
        if settings.kind != "hf":
            from rich.console import Console

            Console(stderr=True).print(
                f"[dim]engine {settings.kind}: a vision model samples with the hf engine (image inputs)[/dim]"
            )
        return HFEngine(model, processor.tokenizer, precision=precision, processor=processor)
    if settings.kind == "hf":
        return HFEngine(model, tokenizer, precision=precision)
    if settings.kind == "batching":
        from tempering.rollout.batching_engine import BatchingEngine

        sized = {} if max_len is None else {"max_len": max_len}
        return BatchingEngine(
            model,
            tokenizer,
            precision=precision,
            max_slots=settings.max_slots,
            max_cache_tokens=settings.max_cache_tokens,
            prefill_chunk=settings.prefill_chunk,
            cuda_graphs=settings.cuda_graphs,
            **sized,
        )
    if settings.kind == "speculative":
        from tempering.rollout.speculative import SpeculativeEngine

        assert settings.draft is not None  # EngineSettings requires a draft for this kind
        drafter = build_drafter(settings.draft, model, tokenizer, precision)
        return SpeculativeEngine(model, tokenizer, drafter, k=settings.draft.k, precision=precision)
    from tempering.rollout.vllm_engine import VLLMEngine

    if model_dir is None:
        raise EngineUnavailable("engine kind 'vllm' loads the model from a directory; none was given")
    return VLLMEngine(model_dir, tokenizer, precision, settings.vllm, probe_model=model)


def build_drafter(draft: DraftSettings, target: Any, tokenizer: Any, precision: str) -> Any:
    """The `Drafter` `draft` names for `target`: a draft model (the target's tokenizer) loaded
    onto the target's device, computing in the target's precision; or prompt lookup."""
    from tempering.data.padding import pad_id
    from tempering.rollout.drafters import ModelDrafter, PromptLookupDrafter

    if draft.model is None:
        return PromptLookupDrafter(max_ngram=draft.max_ngram, min_ngram=draft.min_ngram)
    from tempering.models.load import load_model
    from tempering.models.precision import resolve_precision

    model = load_model(draft.model).to(next(target.parameters()).device).eval()
    vocab = None if draft.vocab is None else _token_ids(draft.vocab)
    pad = pad_id(tokenizer)
    return ModelDrafter(model, resolve_precision(precision), pad, vocab=vocab, min_confidence=draft.min_confidence)


def _token_ids(path: str) -> list[int]:
    try:
        ids = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"engine.draft.vocab {path!r}: not a readable JSON list of token ids ({exc})") from None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise UserError(f"engine.draft.vocab {path!r}: expected a non-empty JSON list of token ids")
    return ids


def load_target(spec: str, precision: str = "auto", quantize: str = "none", place: bool = True) -> tuple[Any, Any, str]:
    """(model, tokenizer, precision) for `spec`, on `default_device()` (a GPU where torch sees one)
    unless `place` is False (vLLM's probe copy stays on the host: the GPU is vLLM's); quantize
    "int8" gives the weight-only int8 copy (an adapter merged first), which computes in "fp32"
    (the int8 layers pick their own dtype)."""
    import torch

    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import default_device, resolve_precision

    model, tokenizer = load_model(spec), load_tokenizer(spec)
    device = default_device() if place else torch.device("cpu")
    if quantize == "int8":
        from tempering.models.quantize import quantize_int8

        if hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        return quantize_int8(model).to(device), tokenizer, "fp32"
    if quantize != "none":
        raise UserError(f"quantize {quantize!r} is not one of none, int8")
    return model.to(device), tokenizer, resolve_precision(precision)


def load_engine(settings: EngineSettings, spec: str, precision: str = "auto", quantize: str = "none") -> Engine:
    """Load the model spec (alias, HF dir, run output, .gguf) and build the engine `settings` name.

    Raises:
        EngineUnavailable: as `build_engine` (checked before the model loads).
        ModelNotFound: no model at `spec`.
    """
    from tempering.models.load import resolve_model

    check_engine(settings)
    if quantize != "none" and settings.kind == "vllm":
        raise EngineUnavailable("quantize: int8 runs on the in-process engines (not vLLM)")
    from tempering.models.vlm import is_vlm

    if is_vlm(spec):
        return _vision_engine(settings, spec, precision, quantize)
    model_dir = resolve_model(spec) if settings.kind == "vllm" else None
    model, tokenizer, resolved = load_target(spec, precision, quantize, place=settings.kind != "vllm")
    return build_engine(settings, model, tokenizer, resolved, model_dir=model_dir)


def _vision_engine(settings: EngineSettings, spec: str, precision: str, quantize: str) -> Engine:
    """The engine over a vision-language model spec (an adapter merged for sampling)."""
    from tempering.models.precision import default_device, resolve_precision
    from tempering.models.vlm import load_vlm

    if quantize != "none":
        raise UserError("quantize: int8 is not supported for vision-language models yet")
    model, processor = load_vlm(spec)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model = model.to(default_device()).eval()
    return build_engine(settings, model, processor.tokenizer, resolve_precision(precision), processor=processor)
