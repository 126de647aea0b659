"""Sampling settings, engines and scale-out: what every command that generates text shares."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from tempering.config.base import Strict


class SamplingSettings(Strict):
    """How to sample: the one sampling config, shared by GRPO, held-out monitoring, eval
    suites and the engine. How many samples and which seed belong to one call
    (`SamplingParams`), not to a config."""

    temperature: float = Field(default=1.0, ge=0)
    """Softmax temperature; 0 is greedy decoding."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = Field(default=32, ge=1)
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
    n: int = Field(default=1, ge=1)
    """Samples per prompt."""
    seed: int | None = None
    """Seeds a private generator, so the same call gives the same samples (None: unseeded)."""
    top_logprobs: int = Field(default=0, ge=0, le=20)
    """Also record the k most likely tokens and their log-probs at each step (OpenAI's
    `top_logprobs`; 0: none), under the same distribution as `Completion.logprobs`."""
    grammar: str | None = None
    """Constrained decoding: an llguidance grammar every sample follows (`rollout/constrain.py`
    writes them from a JSON schema or lark text; the batching engine only)."""


class VLLMSettings(Strict):
    """vLLM engine options (GPU hosts only; `pip install 'tempering[vllm]'` there)."""

    gpu_memory_utilization: float = Field(default=0.3, gt=0, le=1)
    """Share of GPU memory vLLM may take (weights + KV cache); the trainer shares the GPU."""
    max_model_len: int = Field(default=2048, ge=16)
    """Longest prompt + completion vLLM serves (sizes its KV cache)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (a group's n samples, system prompts)."""
    verify_sync: bool = True
    """After each weight sync, read the weights back from vLLM and compare checksums."""


class DraftSettings(Strict):
    """The draft of `kind: speculative` (docs/speculative.md): a small model with the target's
    tokenizer (e.g. a `temper distill` student), or prompt lookup where no model is named."""

    model: str | None = None
    """Draft model spec (alias, HF dir, run output); None: prompt lookup (copies the tokens
    that followed the latest earlier occurrence of the context's last n-gram)."""
    k: int = Field(default=4, ge=1)
    """Draft tokens proposed per target forward."""
    min_confidence: float = Field(default=0.0, ge=0, le=1)
    """Model drafts: a row stops drafting after a token the draft gives less probability than
    this (softmax at temperature 1); 0: always k tokens."""
    vocab: str | None = None
    """Model drafts: a JSON file holding a list of token ids the draft's LM head is cut to
    (the FR-Spec head: tokens outside it are never proposed); None: the full head."""
    max_ngram: int = Field(default=3, ge=1)
    """Prompt lookup: the longest trailing n-gram matched."""
    min_ngram: int = Field(default=1, ge=1)
    """Prompt lookup: the shortest trailing n-gram matched."""

    @model_validator(mode="after")
    def _keys_of_the_other_draft_are_errors(self) -> DraftSettings:
        if self.model is None:
            idle = sorted({"min_confidence", "vocab"} & self.model_fields_set)
            if idle:
                raise ValueError(f"draft {', '.join(idle)} apply to a draft model; set draft.model (or drop them)")
        else:
            idle = sorted({"max_ngram", "min_ngram"} & self.model_fields_set)
            if idle:
                raise ValueError(f"draft {', '.join(idle)} apply to prompt lookup, not to draft.model {self.model!r}")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"draft.min_ngram {self.min_ngram} exceeds draft.max_ngram {self.max_ngram}")
        return self


ENGINE_ONLY_KEYS = {
    "max_slots": "batching",
    "max_cache_tokens": "batching",
    "prefill_chunk": "batching",
    "cuda_graphs": "batching",
    "vllm": "vllm",
    "draft": "speculative",
}
"""EngineSettings keys that only one engine kind reads (set with another kind, they would do nothing)."""


class EngineSettings(Strict):
    """Which `Engine` samples (docs/inference.md); built by `rollout.select.build_engine`."""

    kind: Literal["hf", "batching", "vllm", "speculative"] = "batching"
    """batching: continuous batching in this process (the default); hf: the static-batch
    HFEngine; vllm: vLLM on a CUDA GPU (refused with a message where vLLM or a GPU is absent);
    speculative: a `draft:` proposes tokens that the target verifies (same output as hf)."""
    max_slots: int = Field(default=256, ge=1)
    """batching: most sequences decoded together (KV cache slots; a call allocates only what it needs)."""
    max_cache_tokens: int | None = Field(default=None, ge=1)
    """batching: most KV cache positions the running batch reserves (sequences x the longest
    prompt + max_new_tokens among them); requests beyond it wait. None: max_slots x the context."""
    prefill_chunk: int = Field(default=512, ge=1)
    """batching: a prompt longer than this is prefilled this many tokens a step, between the
    decode steps of the sequences already running (chunked prefill: a long prompt does not stall them)."""
    cuda_graphs: Literal["auto", "on", "off"] = "off"
    """batching: decode steps in batch-size buckets, each captured once as a CUDA graph and
    replayed (docs/gpu.md); off by default until a GPU run has checked it; auto: where the model
    samples on a CUDA device; on: refused elsewhere."""
    vllm: VLLMSettings = VLLMSettings()
    """vLLM options (kind: vllm only)."""
    draft: DraftSettings | None = None
    """The draft (kind: speculative only, where it is required; `draft: {}` is prompt lookup)."""

    @model_validator(mode="after")
    def _keys_of_another_kind_are_errors(self) -> EngineSettings:
        for key, kind in ENGINE_ONLY_KEYS.items():
            if key in self.model_fields_set and getattr(self, key) is not None and self.kind != kind:
                raise ValueError(f"engine.{key} applies to engine kind {kind!r} only, not {self.kind!r}")
        if self.kind == "speculative" and self.draft is None:
            raise ValueError(
                "engine kind 'speculative' needs a draft: engine.draft.model=SPEC (a draft model) "
                "or `draft: {}` (prompt lookup)"
            )
        return self


def _defaulting_kind(kind: str):
    def fill(value: Any) -> Any:
        return {"kind": kind, **value} if isinstance(value, dict) else value

    return BeforeValidator(fill)


HFEngineSettings = Annotated[EngineSettings, _defaulting_kind("hf")]
"""`engine:` of a command that sampled with `HFEngine` before it had `engine:`: a section
without `kind` keeps that engine (EngineSettings' own default is batching)."""


class ChatConfig(Strict):
    """`temper chat MODEL --set engine.kind=...`: what `--set` reaches in chat (sampling has its own flags)."""

    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine replies are sampled with (default: the static-batch HFEngine)."""


class ScaleSettings(Strict):
    """Scale-out on Ray (docs/scale.md): rollout engine replicas and reward workers as actors."""

    backend: Literal["ray"] = "ray"
    """The engine that places workers (Ray; training itself scales with torchrun)."""
    address: str | None = None
    """A running Ray cluster to join (e.g. `ray://head:10001` or `auto`); None starts a local one."""
    num_cpus: int = Field(default=2, ge=1)
    """CPUs of a local Ray instance started here (ignored when joining `address`)."""
    reward_workers: int = Field(default=2, ge=1)
    """Reward/verifier actors, each owning a sandbox pool of `sandbox_slots`."""
    sandbox_slots: int = Field(default=2, ge=1)
    """Sandbox slots (concurrent code runs) of each reward actor."""
    worker_cpus: float = Field(default=0.5, gt=0)
    """CPUs Ray reserves per reward actor."""
    engine_replicas: int = Field(default=1, ge=1)
    """Rollout engine actors; prompts are split between them (1: samples equal the in-process engine's)."""
    engine_gpus: float = Field(default=0.0, ge=0)
    """GPUs per engine replica (0 on CPU machines)."""
    max_retries: int = Field(default=3, ge=0)
    """Times a completion is re-sent after its reward worker died; then it is a verifier error."""
    engine_deadline_s: float = Field(default=600.0, gt=0)
    """Seconds an engine replica may take for one slice of a batch (or a weight load); past it the
    replica is declared hung, killed and replaced, and its slice sent again with the same seed."""
    reward_deadline_s: float = Field(default=20.0, gt=0)
    """Seconds a reward actor may take for one completion; past it the actor is declared hung,
    killed and replaced, and the completions it held are sent again (as after a death). Keep it
    below `grpo.verifier_timeout_s`, which bounds the whole wait for a verdict."""
