"""Long context: RoPE scaling (how a model's rotary positions stretch past its native window) and the
settings of the long-context task builders (`longctx:<kind>`, `temper data longctx`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from tempering.config.base import DEFAULT_MODEL, Strict
from tempering.errors import UserError

YARN_ONLY = ("beta_fast", "beta_slow", "attention_factor")


class RopeScaling(Strict):
    """transformers' own `rope_parameters` (linear, dynamic NTK, YaRN); Tempering only validates and writes them."""

    type: Literal["linear", "dynamic", "yarn"]
    """linear: positions divided by `factor`. dynamic: NTK base grown with the sequence past the
    native window. yarn: NTK-by-parts interpolation with attention temperature (YaRN)."""
    factor: float = Field(gt=1.0)
    """New window / native window (2.0 doubles the context)."""
    original_max_position_embeddings: int | None = Field(default=None, ge=16)
    """The native window the factor stretches (None: the model's own `max_position_embeddings`)."""
    beta_fast: float | None = Field(default=None, gt=0)
    """yarn only: rotations above which dimensions are extrapolated (transformers' default 32)."""
    beta_slow: float | None = Field(default=None, gt=0)
    """yarn only: rotations below which dimensions are interpolated (transformers' default 1)."""
    attention_factor: float | None = Field(default=None, gt=0)
    """yarn only: attention temperature (None: 0.1 ln(factor) + 1, the paper's)."""

    @model_validator(mode="after")
    def _consistent(self) -> RopeScaling:
        if self.type != "yarn":
            given = [k for k in YARN_ONLY if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to type yarn only (type is {self.type})")
        if (self.beta_fast or 32) <= (self.beta_slow or 1):
            raise ValueError(f"beta_fast ({self.beta_fast or 32}) must exceed beta_slow ({self.beta_slow or 1})")
        return self


class RopeScalingSetting(Strict):
    """The `rope_scaling` key of the configs that load a model to train or evaluate (SFT, DPO, RM,
    GRPO, agent, distill, eval): the model's RoPE stretched at load (`models.load.load_model`)."""

    rope_scaling: RopeScaling | None = None
    """RoPE scaling applied at load (`models.rope.scale_rope`; distill: teacher and student); the
    trained model carries it (`final/`, `temper export`). None: the model as saved."""

    @model_validator(mode="after")
    def _scaling_reaches_every_engine(self) -> Any:
        if self.rope_scaling is None:
            return self
        if getattr(self, "scale", None) is not None:
            raise ValueError("rope_scaling with scale: is not supported yet (the Ray replicas load the model unscaled)")
        if getattr(self, "sampler", None) is not None:
            raise ValueError(
                "rope_scaling with sampler: is not supported yet (the engine process loads the model unscaled)"
            )
        if getattr(getattr(self, "engine", None), "kind", None) == "vllm":
            raise ValueError(
                "rope_scaling with engine.kind vllm is not supported (vLLM loads the directory unscaled): "
                "write a scaled copy with `temper model rope` and give that as model"
            )
        return self


class LongctxSettings(Strict):
    """Haystacks of `longctx:<kind>` tasks: lengths in the model's tokens, depths, distractors."""

    lengths: list[int] = Field(default=[1024, 2048, 4096], min_length=1)
    """Prompt lengths in tokens of `model`'s tokenizer (each task is within 2% below its length)."""
    depths: list[float] = Field(default=[0.0, 0.25, 0.5, 0.75, 1.0], min_length=1)
    """Where the answer's first sentence sits, as a fraction of the haystack (0: start, 1: end);
    tasks cycle through the depths at each length."""
    distractors: int = Field(default=3, ge=0, le=8)
    """Other keys, chains, crates or near-duplicate codes planted beside the answer's facts."""
    model: str = DEFAULT_MODEL
    """The model whose tokenizer counts the tokens and whose window (with its RoPE scaling) bounds `lengths`."""
    rope_scaling: RopeScaling | None = None
    """The scaling `model` will run with (the training or eval config's `rope_scaling`): `lengths`
    are then bounded by the scaled window. None: the model's window as saved."""

    @model_validator(mode="after")
    def _depths_in_range(self) -> LongctxSettings:
        bad = [d for d in self.depths if not 0.0 <= d <= 1.0]
        if bad:
            raise ValueError(f"depths: {bad[0]} is outside [0, 1]")
        small = [n for n in self.lengths if n < 64]
        if small:
            raise ValueError(f"lengths: {small[0]} tokens cannot hold a haystack (64 at least)")
        return self


class LongctxDataConfig(LongctxSettings):
    """The `data.longctx` pipeline stage: SFT rows of long-context tasks (`temper data longctx` as a stage)."""

    kinds: list[Literal["passkey", "multikey", "vartrack", "crossfact", "noisy"]] = Field(min_length=1)
    """Task kinds; rows of every kind are interleaved in a seeded order."""
    n: int = Field(default=100, ge=1)
    """Rows per kind per length (depths cycle)."""
    seed: int = 0
    """The same seed writes the same rows (the pipeline's seed when the stage sets none)."""
    split: Literal["train", "heldout"] = "train"
    """train shares no filler sentence, key or name with the heldout split the suites evaluate on."""


def longctx_settings(config: dict[str, Any]) -> LongctxSettings:
    """`config` (a suite source's `config:` mapping) validated, with one-line errors.

    Raises:
        ValueError: `FIELD: reason` for the first invalid or unknown field.
    """
    try:
        return LongctxSettings.model_validate(config)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise UserError(f"{'.'.join(map(str, first['loc']))}: {message}" if first["loc"] else message) from None
