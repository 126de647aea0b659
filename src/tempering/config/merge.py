"""`temper merge`: merging LoRA adapters or full models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tempering.config.base import Paths, RunSettings


class MergeConfig(RunSettings):
    """`temper merge CONFIG.yaml`: merge LoRA adapters (PEFT) or full models (mergekit) into one."""

    inputs: Paths = Field(min_length=1)
    """Models to merge: all LoRA adapter dirs over one base (`runs/NAME/final`), or all full HF dirs."""
    weights: list[float] | None = None
    """One weight per input (None: 1/len(inputs) each); adapters: PEFT's weights, full models: mergekit's."""
    method: Literal["linear", "cat", "svd", "ties", "dare_linear", "dare_ties", "task_arithmetic"] = "linear"
    """Adapters: a PEFT combination type (not task_arithmetic); full models: a mergekit method (not cat, svd)."""
    density: float | None = Field(default=None, gt=0.0, le=1.0)
    """ties / dare: share of each delta kept (None: 1.0 for PEFT, mergekit's default for full models)."""
    majority_sign_method: Literal["total", "frequency"] = "total"
    """ties / dare_ties on adapters: how PEFT elects each parameter's sign."""
    base: str | None = None
    """Full models only: the base the task vectors are taken from (ties, dare, task_arithmetic need one)."""
    merged_model: bool = False
    """Adapters only: also write a standalone model with the merged adapter folded in (run_dir/merged_model)."""
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Weights of the merge and of what it writes."""
    seed: int = 0
    """Seeds DARE's random drop."""

    @model_validator(mode="after")
    def _weights_match(self) -> MergeConfig:
        if self.weights is not None and len(self.weights) != len(self.inputs):
            raise ValueError(
                f"weights has {len(self.weights)} values for {len(self.inputs)} inputs; give one per input"
            )
        return self
