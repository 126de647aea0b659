"""Which `Engine` a run samples with, chosen by its config (`EngineSettings.kind`).

  engine = build_engine(cfg.engine, model, tokenizer, precision, model_dir=resolve_model(cfg.model))

* batching (default): `BatchingEngine`, continuous batching over the model in this process;
* hf: `HFEngine`, the static-batch engine (one batch per call, finished rows dropped);
* vllm: `VLLMEngine` on a CUDA GPU; the trainer's model is kept for the sync probe.
  Without vLLM or a GPU this raises `EngineUnavailable` with the reason, before any
  model is handed to it.
"""

from __future__ import annotations

from typing import Any

from tempering.config import EngineSettings
from tempering.rollout.engine import Engine, HFEngine
from tempering.rollout.vllm_engine import EngineUnavailable, vllm_unavailable

__all__ = ["EngineUnavailable", "build_engine", "check_engine"]


def check_engine(settings: EngineSettings) -> None:
    """Raise `EngineUnavailable` now if `settings` name an engine this host cannot run
    (called where a run starts, so a misconfigured run fails before loading a model)."""
    if settings.kind == "vllm":
        reason = vllm_unavailable()
        if reason:
            raise EngineUnavailable(reason)


def build_engine(
    settings: EngineSettings, model: Any, tokenizer: Any, precision: str, model_dir: str | None = None
) -> Engine:
    """The engine `settings` name, over `model` (in-process engines) or `model_dir` (vLLM).

    Raises:
        EngineUnavailable: kind vllm where vLLM or a GPU is absent, or without a model_dir.
    """
    check_engine(settings)
    if settings.kind == "hf":
        return HFEngine(model, tokenizer, precision=precision)
    if settings.kind == "batching":
        from tempering.rollout.batching_engine import BatchingEngine

        return BatchingEngine(model, tokenizer, precision=precision, max_slots=settings.max_slots)
    from tempering.rollout.vllm_engine import VLLMEngine

    if model_dir is None:
        raise EngineUnavailable("engine kind 'vllm' loads the model from a directory; none was given")
    return VLLMEngine(model_dir, tokenizer, precision, settings.vllm, probe_model=model)
