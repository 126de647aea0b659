"""Sampling settings, engines and scale-out: what every command that generates text shares."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from tempering.config.base import Strict


class SamplingSettings(Strict):
    """How to sample: the one sampling config, shared by GRPO, held-out monitoring, eval
    suites and the engine. How many samples and which seed belong to one call
    (`SamplingParams`), not to a config."""

    temperature: float = Field(1.0, ge=0)
    """Softmax temperature; 0 is greedy decoding."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = Field(32, ge=1)
    """Most tokens generated per completion; a completion cut here is "truncated"."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end a completion; the tokenizer's eos always does."""
    stop: tuple[str, ...] = ()
    """Strings that end a completion (OpenAI's `stop`): the text is cut before the first one
    and `finish_reason` is "stop"; the token that completed it is the last token kept."""

    @field_validator("stop")
    @classmethod
    def _stop_strings_nonempty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("stop strings must be non-empty")
        return v

    def params(self, n: int = 1, seed: int | None = None) -> SamplingParams:
        """The engine request for `n` samples per prompt under these settings."""
        return SamplingParams(**{k: getattr(self, k) for k in SamplingSettings.model_fields}, n=n, seed=seed)


class SamplingParams(SamplingSettings):
    """One `Engine.generate` request: the sampling settings plus samples per prompt and seed."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)
    n: int = Field(1, ge=1)
    """Samples per prompt."""
    seed: int | None = None
    """Seeds a private generator, so the same call gives the same samples (None: unseeded)."""
    top_logprobs: int = Field(0, ge=0, le=20)
    """Also record the k most likely tokens and their log-probs at each step (OpenAI's
    `top_logprobs`; 0: none), under the same distribution as `Completion.logprobs`."""
    grammar: str | None = None
    """Constrained decoding: an llguidance grammar every sample follows (`rollout/constrain.py`
    writes them from a JSON schema or lark text; the batching engine only)."""


class VLLMSettings(Strict):
    """vLLM engine options (GPU hosts only; `pip install 'tempering[vllm]'` there)."""

    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """Share of GPU memory vLLM may take (weights + KV cache); the trainer shares the GPU."""
    max_model_len: int = Field(2048, ge=16)
    """Longest prompt + completion vLLM serves (sizes its KV cache)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (a group's n samples, system prompts)."""
    verify_sync: bool = True
    """After each weight sync, read the weights back from vLLM and compare checksums."""


class EngineSettings(Strict):
    """Which `Engine` samples rollouts and evals (docs/inference.md)."""

    kind: Literal["hf", "batching", "vllm"] = "batching"
    """batching: continuous batching in this process (the default); hf: the static-batch
    HFEngine; vllm: vLLM on a CUDA GPU (refused with a message where vLLM or a GPU is absent)."""
    max_slots: int = Field(256, ge=1)
    """batching: most sequences decoded together (KV cache slots; a call allocates only what it needs)."""
    vllm: VLLMSettings = VLLMSettings()
    """vLLM options (kind: vllm only)."""


class ScaleSettings(Strict):
    """Scale-out on Ray (docs/scale.md): rollout engine replicas and reward workers as actors."""

    backend: Literal["ray"] = "ray"
    """The engine that places workers (Ray; training itself scales with torchrun)."""
    address: str | None = None
    """A running Ray cluster to join (e.g. `ray://head:10001` or `auto`); None starts a local one."""
    num_cpus: int = Field(2, ge=1)
    """CPUs of a local Ray instance started here (ignored when joining `address`)."""
    reward_workers: int = Field(2, ge=1)
    """Reward/verifier actors, each owning a sandbox pool of `sandbox_slots`."""
    sandbox_slots: int = Field(2, ge=1)
    """Sandbox slots (concurrent code runs) of each reward actor."""
    worker_cpus: float = Field(0.5, gt=0)
    """CPUs Ray reserves per reward actor."""
    engine_replicas: int = Field(1, ge=1)
    """Rollout engine actors; prompts are split between them (1: samples equal the in-process engine's)."""
    engine_gpus: float = Field(0.0, ge=0)
    """GPUs per engine replica (0 on CPU machines)."""
    max_retries: int = Field(3, ge=0)
    """Times a completion is re-sent after its reward worker died; then it is a verifier error."""
