"""`temper run`: the pipeline file and the stage kinds that have no command of their own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tempering.config.base import Paths, Strict
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


class TrackSettings(Strict):
    """One specialist track of a pipeline: its training stages from the shared base, its suites, its merge weight."""

    stages: list[str] = Field(min_length=1)
    """The track's training stages (names of `stages`), in order; the last one's `final` is what the merge takes."""
    suites: list[str] = Field(default_factory=list)
    """The track's own suites (names in the eval results): a failed gate rule on one is this track's regression."""
    weight: float = Field(default=1.0, ge=0)
    """The track's weight in the merge stage (the merge's `weights` come from here, in track order)."""
    replay: float = Field(default=0.0, ge=0, lt=1)
    """Share of general replay data (`rebalance.replay.data`) mixed into the track's data from the start (0: none)."""


class TrackReplaySettings(Strict):
    """The general data rebalancing mixes into a track's training data."""

    data: Paths = Field(min_length=1)
    """General-data files (conversations for SFT tracks, pairs for DPO tracks)."""
    ratio: float = Field(default=0.3, gt=0, lt=1)
    """Share of the re-mixed track data taken by replay when rebalancing adds it."""


class RebalanceSettings(Strict):
    """What the runner does when the tracks' merged model fails its gate: re-mix with replay or reweight, then retry."""

    merge: str
    """The merge stage whose `inputs` are the tracks' last stages' `final`, one per track in track order."""
    gate: str
    """The gate stage (after the merge) whose rejection starts the next attempt."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts in all, the first included; the budget of rebalancing."""
    replay: TrackReplaySettings | None = None
    """General data to mix into a track's data; without it rebalancing can only reweight the merge."""
    reweight: float = Field(default=1.5, gt=1)
    """Factor on a regressed track's merge weight (own suite failed), or divisor of every weight (general
    suite failed and every track already has replay)."""


class PipelineConfig(Strict):
    """`temper run PIPELINE.yaml`: named stages run in order, each cached by its content hash."""

    out: str = "runs"
    """Run root: each stage writes <out>/<stage>-<hash12>/; all are recorded in <out>/registry.sqlite."""
    seed: int = 0
    """Pipeline seed: the seed of every stage that does not set its own (part of each stage's hash)."""
    stages: dict[str, dict[str, Any]] = Field(min_length=1)
    """Stages in run order: name -> {kind: ..., <the kind's config keys>}; see docs/pipeline.md."""
    tracks: dict[str, TrackSettings] | None = None
    """Specialist tracks: name -> their training stages, suites and merge weight (docs/multidomain.md)."""
    rebalance: RebalanceSettings | None = None
    """With `tracks`: the merge and gate stages and the retry budget of rebalancing."""
