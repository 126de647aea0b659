"""Preference training and its data: DPO family, pair sampling, reward models, best-of-n."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from tempering.config.base import DEFAULT_MODEL, Paths, RunSettings, Strict, Threads
from tempering.config.grpo import TaskSourceSettings, UsesAlgorithms, registered
from tempering.config.longctx import RopeScalingSetting
from tempering.config.sampling import EngineSettings, HFEngineSettings, SamplingSettings
from tempering.config.train import ChatTemplateSetting, LoraSettings, TrainSettings
from tempering.numbers import BARE_NUMBER_PATTERN


class PreferenceDataSettings(Strict):
    path_fields = ("train", "eval")

    """Preference pairs (`prompt`/`chosen`/`rejected` rows, see data/preference.py) and how they render."""

    train: Paths
    """Training pair files (JSONL, JSON, Parquet or a saved dataset)."""
    eval: Paths = []
    """Held-out pair files: loss and reward accuracy reported before and after training."""
    max_length: int = Field(default=1024, ge=8)
    """Longest prompt + answer (the longer side) in tokens; longer pairs are quarantined, never cut."""
    tool_call_style: Literal["auto", "template", "tempering"] = "auto"
    """How tool calls are written: detected from the template ("auto"), or forced."""


class PreferenceSettings(UsesAlgorithms):
    """The preference loss (objectives/preference.py) and where its reference comes from."""

    algorithm_fields = {"loss": "preference_loss"}

    plugins: list[str] = []
    """Modules to import before `loss` is looked up: each registers its own preference losses on
    import (`@register_preference_loss`; docs/rl.md)."""
    loss: str = "dpo"
    """Registered preference loss (`tempering.algorithms`): dpo (sigmoid; cDPO with label_smoothing),
    ipo, simpo (reference-free), kto (paired KTO), orpo (reference-free odds ratio + NLL), or a plug-in's."""
    beta: float = Field(default=0.1, gt=0)
    """DPO/SimPO/KTO inverse temperature; IPO's tau (the target margin is 1 / (2 tau)); ORPO's lambda."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    """cDPO / SimPO: assumed probability that a pair's label is flipped."""
    simpo_gamma: float = Field(default=0.5, ge=0)
    """SimPO's target reward margin gamma."""
    sft_weight: float = Field(default=0.0, ge=0)
    """Weight of an added per-token NLL term on the chosen answer (RPO); 0 turns it off."""
    reference: Literal["cache", "online"] = "cache"
    """cache: reference log-probs computed once before training and cached on disk under a
    content hash of (model, tokenizer, data, precision); online: under LoRA, recomputed each
    step with adapters disabled."""

    @field_validator("loss")
    @classmethod
    def _loss_is_registered(cls, value: str, info: ValidationInfo) -> str:
        return registered("preference_loss", value, info)


class DPOConfig(ChatTemplateSetting, RopeScalingSetting, RunSettings):
    """`temper dpo CONFIG.yaml`: preference optimisation (DPO, IPO, SimPO) on preference pairs."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path, run output or hub id (the starting policy and the reference)."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters (the reference is then cached before training)."""
    data: PreferenceDataSettings
    """Training and held-out pairs."""
    dpo: PreferenceSettings = PreferenceSettings()
    """Loss type, beta, label smoothing, SimPO margin, SFT term, reference source."""
    train: TrainSettings
    """Steps, pairs per micro-batch (batch_size), precision, seed, optimizer, guard and checkpoints."""


class PairSampling(SamplingSettings):
    """How pair candidates are sampled (the `SamplingSettings` fields; temperature > 0)."""

    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature (> 0: a task needs differing samples to yield a pair)."""
    max_new_tokens: int = Field(default=16, ge=1)
    """Most tokens per candidate; a truncated candidate may be rejected, never chosen."""


class PairsConfig(RunSettings):
    """`temper data pairs`: verifier-built preference pairs from a model's own samples."""

    model: str = DEFAULT_MODEL
    """Model spec of the generator: alias, HF dir, run output, .gguf."""
    tasks: TaskSourceSettings = TaskSourceSettings(n=400)
    """The tasks whose prompts are sampled (their verifier decides which sample is correct)."""
    sampling: PairSampling = PairSampling()
    """Sampling settings of the candidates."""
    k: int = Field(default=8, ge=2)
    """Candidates sampled per task."""
    seed: int = 0
    """Sampling seed (chunk i samples under seed + i) and the seed of the pair choice."""
    kinds: list[Literal["correct", "strict"]] = Field(default_factory=lambda: ["correct", "strict"], min_length=1)
    """Pair kinds: `correct` = a verified-correct sample over an incorrect one; `strict` = a
    correct reply in the strict format over a sloppy (correct but unformatted) or incorrect one."""
    strict: list[dict[str, Any]] = Field(
        default_factory=lambda: [
            {"type": "exact"},
            {"type": "regex", "on": "completion", "pattern": BARE_NUMBER_PATTERN},
        ]
    )
    """Verifier specs (each merged over the task's own spec) that a strict reply passes, all of them.
    Default: the exact answer and nothing but a number."""
    reformat: bool = True
    """When no sample of a task is strict, build the strict reply from a verified-correct sample's
    own final answer (reduced to the bare number, re-verified); marked `chosen_origin: reformatted`."""
    pairs_per_kind: int = Field(default=2, ge=1)
    """Most pairs of each kind per task (each with a different rejected sample)."""
    chunk_tasks: int = Field(default=32, ge=1)
    """Tasks per generation batch (progress advances per batch)."""
    output: str
    """The pair JSONL file to write (replaced)."""
    threads: Threads = "auto"
    """torch intra-op threads: "auto" (the cores free now: usable cores minus the load average), a count, or null (torch's default)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine that samples (default: the static-batch HFEngine; docs/inference.md)."""


class RMDataSettings(Strict):
    path_fields = ("train", "eval")

    """Preference pairs for a reward model (the pair row contract, see data/preference.py)."""

    train: Paths
    """Pair files (JSONL / JSON / Parquet) to train on."""
    eval: Paths = []
    """Held-out pair files; empty: hold out `eval_share` of the training prompts instead."""
    eval_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    """Without `eval`: share of distinct prompts (all their pairs) held out, seeded by train.seed."""
    max_length: int = Field(default=512, ge=8)
    """Longest rendered side (prompt + answer) in tokens; longer pairs are quarantined, never cut."""
    tool_call_style: Literal["auto", "template", "tempering"] = "auto"
    """How tool calls are written: detected from the template ("auto"), or forced."""


class RMSettings(Strict):
    """The Bradley-Terry objective and the held-out evaluation of a reward model."""

    margin: float = 0.0
    """Constant margin m in -log sigmoid(r_chosen - r_rejected - m)."""
    margin_key: str | None = None
    """Key in a row's `meta` holding a per-pair margin (added to `margin`); rows without it use 0."""
    use_weights: bool = True
    """Multiply each pair's loss by its row `weight` (e.g. annotator agreement)."""
    center_coef: float = Field(default=0.0, ge=0.0)
    """Weight of the (r_chosen + r_rejected)^2 term that keeps scores centred on 0."""
    eval_batch_size: int = Field(default=16, ge=1)
    """Pairs per forward when scoring the held-out set."""
    bootstrap_resamples: int = Field(default=2000, ge=100)
    """Bootstrap resamples of the held-out accuracy's confidence interval."""


class BestOfNSettings(SamplingSettings):
    """Best-of-n after training: sample n answers per task, pick the highest reward-model score."""

    temperature: float = Field(default=0.7, gt=0)
    """Sampling temperature of the n candidates (> 0, or all n would be the same)."""
    policy: str = DEFAULT_MODEL
    """The model that samples the candidates."""
    tasks: TaskSourceSettings = TaskSourceSettings(split="heldout", n=100)
    """Tasks to answer; their own verifier judges the picked answer (the RM never sees it)."""
    n: int = Field(default=8, ge=2)
    """Candidates per task."""
    seed: int = 0
    """Sampling seed."""
    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine that samples the candidates (default: the static-batch HFEngine; docs/inference.md)."""


class RMConfig(RopeScalingSetting, RunSettings):
    """`temper rm CONFIG.yaml`: a Bradley-Terry reward model on preference pairs."""

    model: str = DEFAULT_MODEL
    """Base model spec the reward model is built on (alias, HF dir, GGUF path or hub id)."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings for the base (the scalar head is always fully trained); null: all parameters."""
    data: RMDataSettings
    """Training and held-out pairs."""
    rm: RMSettings = RMSettings()
    """Margin, weights, centring and held-out evaluation."""
    train: TrainSettings
    """Steps, pairs per micro-batch, precision, seed, optimizer, guard and checkpoints."""
    best_of_n: BestOfNSettings | None = None
    """Optional best-of-n evaluation with the trained model; null: skipped."""
