"""`temper sft`: supervised fine-tuning."""

from __future__ import annotations

from pydantic import model_validator

from tempering.config.base import DEFAULT_MODEL, RunSettings
from tempering.config.longctx import RopeScalingSetting
from tempering.config.train import (
    CONTEXT_PARALLEL_REFUSALS,
    ChatTemplateSetting,
    DataSettings,
    LoraSettings,
    TrainSettings,
)


class SFTConfig(ChatTemplateSetting, RopeScalingSetting, RunSettings):
    """`temper sft CONFIG.yaml`: supervised fine-tuning on conversations."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path, hub id or a checkpoint (`runs/NAME@step-40`)."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    data: DataSettings
    """Training, eval and replay data, and how it is rendered and packed."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints."""

    @model_validator(mode="after")
    def _context_parallel_rows(self) -> SFTConfig:
        if self.train.context_parallel > 1 and self.data.packing:
            raise ValueError(CONTEXT_PARALLEL_REFUSALS["packing"])
        return self
