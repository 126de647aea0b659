"""`ServeConfig`: what `temper serve` runs with (pydantic, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tempering.config import DEFAULT_MODEL, EngineSettings

SLOTS = 32
"""Concurrent sequences one served model decodes together by default (`engine.max_slots`)."""
CACHE_TOKENS = 16384
"""KV cache positions one served model reserves at most by default (`engine.max_cache_tokens`):
SLOTS requests of 512 prompt + answer tokens run together, longer ones fewer at a time. On
the 135M default model that is 0.53 GiB (bf16) instead of 2.1 GiB for SLOTS x MAX_LEN."""


class ServeConfig(BaseModel):
    """One `temper serve` deployment. Every field is set by a CLI flag of the same name or `--set field=value`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    host: str = "127.0.0.1"
    """Address to listen on (loopback by default: nothing leaves the machine)."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port (0: any free port)."""
    state: Path = Path("serve")
    """Directory of the deployment's database (keys, audit log, feedback, arena votes)."""
    registry: str | None = None
    """Release registry (SQLite file or PostgreSQL URL); None: serve `model` only."""
    model: str = DEFAULT_MODEL
    """The model served when the registry has no `production` release."""
    canary_share: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of requests for `production` answered by the `candidate` release, when one exists."""
    log_text: bool = False
    """Opt-in: keep request and response text in the audit log (feedback export needs it)."""
    capture_tokens: bool = False
    """Opt-in: keep each answer's prompt ids, sampled ids and their log-probs in the audit log, and
    continue a chat history this key was served token-exactly, so `temper feedback export
    --trajectories` writes trainable episodes (serve/capture.py; needs `log_text`)."""
    rate_limit: int = Field(default=600, ge=1)
    """Requests per minute per key, unless the key was created with its own limit."""
    max_tokens: int = Field(default=256, ge=1)
    """Default and largest `max_tokens` of a request."""
    max_sequences: int = Field(default=SLOTS, ge=1)
    """Most sequences (prompts x n) one request may make the engine decode; more is a 400."""
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest request body in bytes; a longer one is a 413, refused before it is parsed."""
    max_images: int = Field(default=8, ge=1)
    """Most `image_url` parts one chat request may carry (a vision model); more is a 400, before any is decoded."""
    max_image_pixels: int = Field(default=2 * 4096 * 4096, ge=1)
    """Most pixels the images of one request may hold together (width x height, read from their
    headers before any is decoded; each decodes to 3 bytes a pixel); more is a 400."""
    refused_audit_s: float = Field(default=60.0, ge=0.0)
    """Seconds between audit rows of one key's rate-limited (429) requests; those between are counted into the next."""
    precision: str = "auto"
    """auto | bf16 | fp32 for the engines."""
    quantize: Literal["none", "int8"] = "none"
    """int8: serve weight-only int8 copies of the models (CPU; faster decoding, outputs change
    slightly: gate the int8 model before serving it, docs/speculative.md)."""
    engine: EngineSettings = EngineSettings(max_slots=SLOTS, max_cache_tokens=CACHE_TOKENS)
    """The engine of every served model: continuous batching (`kind: batching`, the only kind
    that streams and admits requests into a running batch); `max_slots` sequences decode together."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """Most seconds a request waits for the engine's answer (and a stream for its next token); past
    it the request is a 504 (a stream ends with an error event) and its decoding is stopped. While
    an engine step has run longer than this, `/health` answers 503 `stuck`."""
    max_loaded: int = Field(default=3, ge=1)
    """Most models kept loaded at once (least recently used is dropped)."""
    arena_prompts: Path | None = None
    """Prompts the arena draws from (JSONL rows with `prompt`, or one prompt per line of text)."""
    arena_max_tokens: int = Field(default=96, ge=1)
    """Tokens per arena answer."""
    arena_temperature: float = Field(default=0.7, ge=0.0)
    """Sampling temperature of arena answers."""
    seed: int = 0
    """Seeds canary routing and the arena's draws (pairings, sides)."""

    @model_validator(mode="after")
    def _engine_can_serve(self) -> ServeConfig:
        if self.engine.kind != "batching":
            raise ValueError(
                f"engine.kind {self.engine.kind!r} cannot serve: requests join a running batch and stream, "
                "which only the batching engine does (kind: batching)"
            )
        return self

    @model_validator(mode="after")
    def _capture_keeps_text(self) -> ServeConfig:
        if self.capture_tokens and not self.log_text:
            raise ValueError(
                "capture_tokens: true keeps token ids, which are the text; set log_text: true as well "
                "(the exported episodes carry their messages)"
            )
        return self

    @property
    def db_path(self) -> Path:
        return self.state / "serve.sqlite"


class TinkerServeConfig(BaseModel):
    """One `temper tinker serve` deployment: the Tinker API (training and sampling clients)
    for the official `tinker` SDK. Every field is set by a CLI flag of the same name or `--set`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    host: str = "127.0.0.1"
    """Address to listen on (loopback by default: nothing leaves the machine)."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port (0: any free port)."""
    state: Path = Path("serve")
    """Directory of the deployment's database (keys, audit log) and of saved Tinker weights (`tinker/`)."""
    registry: str | None = None
    """Registry each training client's run is recorded in (SQLite file or PostgreSQL URL);
    None: `registry.sqlite` in `state`."""
    model: str = DEFAULT_MODEL
    """The base model clients train and sample (listed by `get_server_capabilities`)."""
    base_models: list[str] = []
    """More base models clients may use (model specs); a client names one by its spec or by the
    directory it resolves to, and any other name is refused (client text is never loaded)."""
    rate_limit: int = Field(default=6000, ge=1)
    """Requests per minute per key (a training loop polls its futures, so more than the OpenAI server's)."""
    max_tokens: int = Field(default=1024, ge=1)
    """Largest `max_tokens` of a sample request (the default when a request gives none)."""
    max_samples: int = Field(default=64, ge=1)
    """Most samples (`num_samples`) one sample request may ask for; more is refused."""
    max_body_bytes: int = Field(default=64 << 20, ge=1 << 20)
    """Largest request body in bytes (forward_backward chunks are cut to a quarter of it)."""
    max_samplers: int = Field(default=2, ge=1)
    """Most sampling models kept loaded at once (least recently used is dropped)."""
    max_recorded_tokens: int = Field(default=4_000_000, ge=1)
    """Most tokens of recorded samples (`record_stability_info`: each sequence's prompt and sampled
    tokens) kept in memory, all keys together; the least recently used sequences are dropped first."""
    precision: str = "auto"
    """auto | bf16 | fp32 for training (bf16 autocast over float32 weights) and the sampling engines."""
    engine: EngineSettings = EngineSettings(kind="hf")
    """The engine sampling clients run on (`hf`: static batches of one request's samples)."""
    poll_s: float = Field(default=20.0, gt=0)
    """Longest a `retrieve_future` call waits for its result before answering `try_again`."""
    max_lora_rank: int = Field(default=128, ge=1)
    """Largest LoRA rank a training client may ask for."""
    max_models_per_key: int = Field(default=8, ge=1)
    """Most training clients one key holds at once (finishing a session, `ServiceClient.close`, frees its clients)."""
    max_models: int = Field(default=16, ge=1)
    """Most training clients the server holds at once, all keys together."""
    max_datum_tokens: int = Field(default=4096, ge=1)
    """Most input tokens of one datum of forward_backward, or of one sample prompt."""
    max_call_tokens: int = Field(default=65536, ge=1)
    """Most input tokens of one forward_backward call, all its datums together."""
    step_tokens: int = Field(default=512, ge=1)
    """Padded tokens (datums x the longest) of one step of a forward_backward: the worker runs one
    step of a key's call, then one of the next key's, so a long call delays others by a step."""
    call_timeout_s: float = Field(default=900.0, gt=0)
    """Most seconds of work one call may take (its own steps, not its wait); a longer one is
    stopped at the end of a step, its gradients restored, and fails."""
    hang_grace_s: float = Field(default=60.0, gt=0)
    """Seconds past a call's `call_timeout_s` that one of its steps may run before the worker is
    declared stuck: the call fails, nothing more is served and `/api/v1/healthz` answers 503."""
    max_queued_per_key: int = Field(default=64, ge=1)
    """Most calls of one key waiting or running at once; more is a 429 (the SDK retries it)."""
    shutdown_s: int = Field(default=3, ge=1)
    """Seconds a stopping server gives open requests after it has stopped the calls."""

    @model_validator(mode="after")
    def _datum_fits_a_call(self) -> TinkerServeConfig:
        if self.max_datum_tokens > self.max_call_tokens:
            raise ValueError(
                f"max_datum_tokens {self.max_datum_tokens} is over max_call_tokens {self.max_call_tokens}: "
                "a datum that fits could never be sent"
            )
        return self

    @property
    def db_path(self) -> Path:
        return self.state / "serve.sqlite"

    @property
    def registry_location(self) -> str:
        return self.registry or str(self.state / "registry.sqlite")
