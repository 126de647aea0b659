"""`temper eval run`: suites on a model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tempering.config.base import DEFAULT_MODEL, Threads
from tempering.config.longctx import RopeScalingSetting
from tempering.config.sampling import EngineSettings, ScaleSettings
from tempering.config.train import TrackerName


class EvalConfig(RopeScalingSetting):
    """`temper eval run [SUITES] --config EVAL.yaml`: suites on a model (flags override the file)."""

    suites: list[str] = Field(min_length=1)
    """Suite names (built-in or user suite directories) or suite YAML paths."""
    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, run output (runs/NAME/final), .gguf."""
    out: str
    """Directory for results.json, samples.jsonl and report.html."""
    seeds: int | None = Field(default=None, ge=1)
    """Sampling seeds, each a full repeat of every suite (None: each suite's own)."""
    first_seed: int = Field(default=0, ge=0)
    """The seeds are first_seed .. first_seed + seeds - 1."""
    samples: int | None = Field(default=None, ge=1)
    """Samples per task per seed (None: each suite's own); pass@k needing more is skipped with a note."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many tasks per task source (a subset, so its own suite hash)."""
    cache: bool = True
    """Reuse results cached under <tempering cache>/evals for the same model, suite and settings."""
    threads: Threads = "auto"
    """torch intra-op threads: "auto" (the cores free now: usable cores minus the load average), a count, or null (torch's default)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    engine: EngineSettings = EngineSettings()
    """The engine that samples the suites (`agent:` suites: the static-batch HFEngine unless
    `engine:` is set)."""
    quantize: Literal["none", "int8"] = "none"
    """int8: evaluate the weight-only int8 copy of the model (what `temper serve --quantize int8`
    serves), so the gate can compare it with the float model."""
    loggers: list[TrackerName] = []
    """Experiment trackers that receive each suite's metrics, the config and the model's hash
    (as `train.loggers`; docs/integrations.md)."""
    scale: ScaleSettings | None = None
    """Ray (docs/scale.md): sample on engine replicas and score on reward actors (each with its
    own sandbox pool) instead of in this process; same samples and scores with one replica."""

    @model_validator(mode="after")
    def _no_key_is_ignored_under_scale(self) -> EvalConfig:
        if self.scale is not None and "engine" in self.model_fields_set:
            raise ValueError(
                "engine: does nothing with scale: (the Ray replicas sample with HFEngine); drop one of them"
            )
        # the Ray replicas load the float model: an int8 request there would do nothing
        if self.scale is not None and self.quantize != "none":
            raise ValueError("quantize: int8 with scale: set is not supported (Ray replicas serve the float model)")
        agent = [s for s in self.suites if s.startswith("agent:")]  # evals.agent_suites.PREFIX
        if self.rope_scaling is not None and agent:
            raise ValueError(
                f"rope_scaling with agent suites ({agent[0]}) is not supported yet (they load the model unscaled)"
            )
        if agent and (self.quantize != "none" or self.scale is not None):  # the agent runner loads the float model
            key = "quantize" if self.quantize != "none" else "scale"
            raise ValueError(
                f"{key} with agent suites ({agent[0]}) is not supported yet (they sample in-process, unquantized)"
            )
        return self
