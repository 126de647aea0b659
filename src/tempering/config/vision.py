"""`temper vision-sft`: supervised fine-tuning of a vision-language model, one stage of the two-stage recipe."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tempering.config.base import RunSettings
from tempering.config.train import DataSettings, LoraSettings, TrainSettings

VisionPart = Literal["vision", "projector", "language"]


class VisionSFTConfig(RunSettings):
    """`temper vision-sft CONFIG.yaml`: train some parts of a VLM on conversations with images.

    The two-stage recipe is two of these (docs/vision.md): projector alignment (`parts:
    [projector]`, `lora: null`; add `vision` when the encoder was assembled here with random
    weights), then instruction tuning (`parts: [projector]` with `lora:` on the language model).
    """

    model: str
    """A vision-language model directory (assembled by `temper vision assemble`, or a real one saved
    with its processor), an adapter directory over one, or a checkpoint of either."""
    parts: list[VisionPart] = Field(default_factory=lambda: ["projector"], min_length=1)
    """The parameter groups trained in full: `vision` (the encoder), `projector` (the connector),
    `language` (the whole language model; with `lora:` set, use LoRA for it instead)."""
    lora: LoraSettings | None = None
    """LoRA on the language model's linear layers (`all-linear` means the language model's only,
    never the vision encoder's); null: no adapters."""
    data: DataSettings
    """Training and eval conversations with `image_url` parts; `packing` must be false (examples
    with images are padded, not packed) and `format` chat."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints."""

    @model_validator(mode="after")
    def _fits_images(self) -> VisionSFTConfig:
        if self.data.packing:
            raise ValueError("data.packing: examples with images are padded, not packed; set data.packing: false")
        if self.data.replay is not None:
            raise ValueError("data.replay: vision_sft has no replay yet; mix text rows into data.train instead")
        if self.data.format != "chat":
            raise ValueError("data.format: vision_sft trains on chat rows (format: chat)")
        if self.lora is not None and "language" in self.parts:
            raise ValueError("parts: 'language' trains the language model in full; drop it or set lora: null")
        return self
