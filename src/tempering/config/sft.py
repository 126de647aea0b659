"""`temper sft`: supervised fine-tuning."""

from __future__ import annotations

from tempering.config.base import DEFAULT_MODEL, RunSettings
from tempering.config.train import DataSettings, LoraSettings, TrainSettings


class SFTConfig(RunSettings):
    """`temper sft CONFIG.yaml`: supervised fine-tuning on conversations."""

    path_fields = ("chat_template",)

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path, hub id or a checkpoint (`runs/NAME@step-40`)."""
    chat_template: str | None = None
    """Replaces the model's chat template: a Jinja file, or the template inline (it holds `{`);
    saved with the trained model."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    data: DataSettings
    """Training, eval and replay data, and how it is rendered and packed."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints."""

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        return "{" in value  # an inline template, not a path
