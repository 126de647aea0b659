"""The data-engineering commands: dedup, decontam, mix, stratify, feedback, synth."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tempering.config.base import DEFAULT_MODEL, Paths, RunSettings, Strict, Threads
from tempering.config.grpo import TaskSourceSettings
from tempering.config.sampling import EngineSettings, HFEngineSettings, SamplingSettings

Track = Literal["general", "reasoning", "code", "agent", "safety", "longctx"]
"""The tracks a data mix reports shares by (`data.mixing.TRACKS` reads them from here)."""


class DedupSettings(Strict):
    """`temper data dedup`: exact and near-duplicate removal (see `data.dedup`)."""

    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    """Near duplicates: rows whose word-shingle Jaccard similarity is at least this."""
    num_perm: int = Field(default=128, ge=2)
    """MinHash permutations (LSH proposes candidates; each is checked with exact Jaccard)."""
    shingle: int = Field(default=5, ge=1)
    """Words per shingle."""
    seed: int = 1
    """MinHash seed; same input and seed give the same output."""
    near: bool = True
    """Also remove near duplicates (False: exact duplicates only)."""


class DecontamSettings(Strict):
    """`temper data decontam`: the n-gram contamination rule (see `evals.contamination`)."""

    n: int = Field(default=13, ge=1)
    """Gram length in words (tasks shorter than n are one gram of their full length)."""
    min_coverage: float = Field(default=0.5, gt=0.0, le=1.0)
    """A row contains a task when it holds at least this share of the task's distinct indexed grams."""
    boilerplate_tasks: int = Field(default=3, ge=2)
    """Grams shared by this many suite tasks or more are boilerplate and not indexed."""


class MixSourceSettings(Strict):
    """One source of a data mix."""

    name: str = Field(min_length=1)
    """Name of the source in reports and the registry (unique within the mix)."""
    data: Paths = Field(min_length=1)
    """Its files (JSONL / JSON / Parquet / saved dataset dir); rows of any kind."""
    track: Track = "general"
    """The capability track the source feeds (shares are also reported per track)."""
    weight: float = Field(default=1.0, gt=0)
    """Relative weight among the non-replay sources (normalised to their share)."""
    max_epochs: float | None = Field(default=4.0, gt=0)
    """Upsampling cap: at most this many times the source's size per mix (None: no cap)."""


class MixReplaySettings(Strict):
    """General data replayed into the mix as a forgetting guard."""

    data: Paths = Field(min_length=1)
    """General-data files."""
    ratio: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Share of the whole mix (rows or tokens, as `by`) taken by replay."""
    name: str = "replay"
    """Name of the replay source in reports."""
    max_epochs: float | None = Field(default=4.0, gt=0)
    """Upsampling cap of the replay data (None: no cap)."""


class MixConfig(RunSettings):
    """`temper data mix CONFIG.yaml`: a seeded, epoch-aware weighted mixture of sources."""

    sources: list[MixSourceSettings] = Field(min_length=1)
    """The sources and their weights."""
    replay: MixReplaySettings | None = None
    """Optional replay of general data at a fixed share of the mix."""
    size: int = Field(ge=1)
    """Mix size: rows (by: rows) or tokens (by: tokens)."""
    by: Literal["rows", "tokens"] = "rows"
    """What the shares and the size count."""
    tokenizer: str | None = None
    """Model spec whose tokenizer counts tokens (None: whitespace words)."""
    seed: int = 0
    """Seeds the source walks and the interleaving (same seed, same mix)."""
    epoch: int = Field(default=0, ge=0)
    """Mix epoch: epoch e continues each source's walk where epoch e-1 stopped."""
    tolerance: float = Field(default=0.01, gt=0, lt=1)
    """Largest accepted |realised - effective share|; beyond it the command fails."""
    output: str | None = None
    """Where the mixed JSONL goes (default: runs/<name>/mix.jsonl)."""


class StratifyConfig(RunSettings):
    """`temper data stratify CONFIG.yaml`: measured pass rates -> difficulty buckets -> an RL set."""

    model: str = DEFAULT_MODEL
    """Model whose pass rates are measured."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """The tasks to stratify."""
    k: int = Field(default=8, ge=1)
    """Samples per task for the pass-rate estimate."""
    sampling: SamplingSettings = SamplingSettings()
    """Sampling of the k samples (temperature > 0 for a spread)."""
    too_easy: float = Field(default=1.0, gt=0, le=1)
    """Pass rate at or above which a task is mastered (dropped from the RL set)."""
    too_hard: float = Field(default=0.0, ge=0, lt=1)
    """Pass rate at or below which a task is out of reach (dropped from the RL set)."""
    order: Literal["curriculum", "shuffle", "source"] = "curriculum"
    """Order of the RL set: easy to hard, seeded shuffle, or as the tasks came."""
    seed: int = 0
    """Sampling seed (and shuffle seed)."""
    batch_prompts: int = Field(default=32, ge=1)
    """Prompts per generation batch."""
    reward_workers: int = Field(default=4, ge=1)
    """Threads scoring completions."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine that samples (default: the static-batch HFEngine; docs/inference.md)."""
    threads: Threads = "auto"
    """torch intra-op threads: "auto" (the cores free now: usable cores minus the load average), a count, or null (torch's default)."""


class FeedbackConfig(RunSettings):
    """The pipeline's `feedback` stage: failed eval cases, served bad cases and votes -> next round's data."""

    evals: Paths = []
    """Eval run dirs, their results.json or samples.jsonl: failed samples are clustered and mined."""
    served: Paths = []
    """Bad-case JSONL from `temper feedback export` (thumbs down, reports, corrections)."""
    votes: Paths = []
    """Preference pairs from `temper arena export` (with votes), passed on as pairs."""
    pool: TaskSourceSettings | None = None
    """Training tasks to mine near neighbours of failed prompts from (None: no mining)."""
    per_failure: int = Field(default=2, ge=1)
    """Pool tasks mined per failed prompt (nearest by character n-gram TF-IDF)."""
    max_tasks: int = Field(default=2000, ge=1)
    """Most tasks written."""
    clusters: int | None = Field(default=None, ge=1)
    """Failure clusters (None: chosen by silhouette)."""
    seed: int = 0
    """Seed of the clustering."""


class SynthConfig(RunSettings):
    """`temper data synth CONFIG.yaml`: the flywheel, generate -> verify -> keep the best -> SFT set."""

    model: str = DEFAULT_MODEL
    """Generator model."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """Prompts with their verifiers."""
    n: int = Field(default=8, ge=1)
    """Candidates generated per prompt."""
    sampling: SamplingSettings = SamplingSettings()
    """Sampling of the candidates."""
    reflow: Literal["none", "final_answer"] = "none"
    """Rewrite a verified answer into the asked form: `final_answer` keeps only the verifier's
    extracted final answer (when the rewrite still verifies); recorded in the row's provenance."""
    min_score: float = Field(default=1.0, ge=0)
    """A candidate is kept only when it passed and its reward is at least this."""
    pairs: bool = False
    """Also write preference pairs (best correct vs a failed candidate of the same prompt)."""
    seed: int = 0
    """Sampling seed."""
    batch_prompts: int = Field(default=32, ge=1)
    """Prompts per generation batch."""
    reward_workers: int = Field(default=4, ge=1)
    """Threads scoring completions."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine that samples (default: the static-batch HFEngine; docs/inference.md)."""
    threads: Threads = "auto"
    """torch intra-op threads: "auto" (the cores free now: usable cores minus the load average), a count, or null (torch's default)."""
