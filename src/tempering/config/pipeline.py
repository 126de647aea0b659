"""`temper run`: the pipeline file and the stage kinds that have no command of their own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tempering.config.base import Strict
from tempering.config.data import DecontamSettings, DedupSettings
from tempering.config.preference import BestOfNSettings


class DedupStageConfig(DedupSettings):
    """A `data.dedup` stage of a pipeline: one data file, deduplicated (settings as `temper data dedup`)."""

    data: str
    """Training data to deduplicate (JSONL / JSON / Parquet), a path or a reference like ${synth.sft}."""


class DecontamStageConfig(DecontamSettings):
    """A `data.decontam` stage of a pipeline: rows matching no eval suite are kept."""

    data: str
    """Training data to decontaminate, a path or a reference like ${dedup.data}."""
    against: list[str] = Field(min_length=1)
    """Suites to check against: names or suite YAML paths."""


class GateStageConfig(Strict):
    """A `gate` stage: `evals.gate` rules over a baseline and a candidate eval stage's results."""

    base: str
    """Baseline results.json, usually a reference like ${baseline.results}."""
    candidate: str
    """Candidate results.json, usually a reference like ${after.results}."""
    rules: list[str] | None = None
    """Gate rules written inline (the `temper eval compare --gate` forms); give this or rules_file."""
    rules_file: str | None = None
    """A gate rules YAML (the file `temper eval compare --gate` reads); give this or rules."""
    seed: int = 0
    """Seed of the paired bootstrap."""


class BestOfNStageConfig(BestOfNSettings):
    """A `best-of-n` stage (as `temper best-of-n`): the policy samples n answers per task, the
    reward model picks one, the tasks' verifier measures the pick against a random one and the oracle."""

    reward_model: str
    """A reward model (`temper rm` output), usually a reference like ${rm.final}."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """Precision of both models."""


class ReleaseStageConfig(Strict):
    """A `release` stage: promote a checkpoint whose gate passed (runs/releases.py)."""

    model: str
    """The checkpoint to release, usually a reference like ${sft.final}."""
    gate: str
    """The gate's verdict file, usually ${gate.verdict}; a failed verdict refuses the release."""
    alias: Literal["production", "candidate"] = "production"
    """production: release now; candidate: a canary that a later gate promotes or rolls back."""


class ExportStageConfig(Strict):
    """An `export` stage: merge a LoRA adapter into its base, a standalone HF model dir (as `temper export`)."""

    model: str
    """The adapter to export, usually a reference like ${grpo.final}."""
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Weights of the merged model (bf16/fp16 halve the files; fp32 keeps the trained numbers)."""


class PipelineConfig(Strict):
    """`temper run PIPELINE.yaml`: named stages run in order, each cached by its content hash."""

    out: str = "runs"
    """Run root: each stage writes <out>/<stage>-<hash12>/; all are recorded in <out>/registry.sqlite."""
    seed: int = 0
    """Pipeline seed: the seed of every stage that does not set its own (part of each stage's hash)."""
    stages: dict[str, dict[str, Any]] = Field(min_length=1)
    """Stages in run order: name -> {kind: ..., <the kind's config keys>}; see docs/pipeline.md."""
