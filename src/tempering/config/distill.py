"""Typed configuration of `temper distill` (no torch import, like `tempering.config`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from tempering.config.base import DEFAULT_MODEL, RunSettings, Strict
from tempering.config.train import DataSettings, TrainSettings


class StudentSettings(Strict):
    """Which student learns: a smaller copy of the teacher, or an existing model."""

    layers: list[int] | None = None
    """Teacher decoder layers copied, in order, into a smaller student (embeddings, final norm
    and LM head are copied too), e.g. [0, 29]; None: start from `model`."""
    model: str | None = None
    """An existing student (alias, HF dir, .gguf) with the teacher's vocabulary; used when
    `layers` is None."""

    @field_validator("layers")
    @classmethod
    def _layers_nonempty(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or min(v) < 0 or len(set(v)) != len(v)):
            raise ValueError(f"layers must be distinct non-negative teacher layer indices, got {v}")
        return v


class DistillLoss(Strict):
    """The distillation loss: forward KL to the teacher plus cross-entropy on the data."""

    temperature: float = Field(1.0, gt=0)
    """Softmax temperature of both teacher and student in the KL term (scaled by T^2, Hinton et al.)."""
    kl_weight: float = Field(1.0, ge=0, le=1)
    """Weight of the KL term; 1 - kl_weight goes to next-token cross-entropy on the data's
    assistant tokens (sequence-level distillation when the data are the teacher's generations)."""


class DistillConfig(RunSettings):
    """`temper distill CONFIG.yaml`: train a student on a teacher's logits and generations."""

    teacher: str = DEFAULT_MODEL
    """Teacher model spec: alias, HF dir, GGUF path or hub id."""
    student: StudentSettings
    """The student: a subset of the teacher's layers, or an existing model."""
    data: DataSettings
    """Conversations to distil on (e.g. the teacher's verified generations from `temper data synth`)."""
    loss: DistillLoss = DistillLoss()
    """KL temperature and the KL / cross-entropy mix."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints (all student parameters train)."""
