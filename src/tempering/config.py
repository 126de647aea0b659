"""Typed configuration for every entry point. No torch import here.

Every model rejects unknown keys (a typo is an error, not a silently ignored setting) and
documents each field where it is defined.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

DEFAULT_MODEL = "smollm2-135m-instruct"


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


Paths = Annotated[list[str], BeforeValidator(_one_or_many)]
"""File paths: a list, or one path as a plain string."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class LoraSettings(Strict):
    r: int = Field(16, ge=1)
    """LoRA rank."""
    alpha: int = Field(32, ge=1)
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input."""
    target_modules: list[str] | str = "all-linear"
    """Module names to adapt, or "all-linear"."""
    last_layers: int | None = Field(None, ge=1)
    """Adapt only the last N decoder layers (None: all). Backward then stops at the lowest
    adapted layer, which makes RL steps much cheaper."""


class ReplaySettings(Strict):
    data: Paths
    """General-data files mixed into the stage as a forgetting guard."""
    ratio: float = Field(0.1, gt=0.0, lt=1.0)
    """Share of the training examples drawn from `data` (0.1 = 10%)."""


class DataSettings(Strict):
    train: Paths
    """Training files (JSONL or Parquet with a `messages` column)."""
    eval: Paths = []
    """Held-out files whose loss is reported before and after training."""
    max_length: int = Field(1024, ge=8)
    """Longest rendered conversation in tokens; longer rows are quarantined, never cut."""
    packing: bool = True
    """Pack a batch's conversations into as few rows as fit (no attention across them)."""
    tool_call_style: Literal["auto", "template", "tempering"] = "auto"
    """How tool calls are written: detected from the template ("auto"), or forced."""
    replay: ReplaySettings | None = None
    """Optional replay of general data mixed into this stage."""


class OptimSettings(Strict):
    lr: float = Field(2e-5, gt=0)
    """Peak learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warmup from 0 to `lr` over this many optimizer steps."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Decay after warmup, down to `lr * min_lr_ratio` at the last step."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """Final learning rate as a fraction of `lr`."""
    max_grad_norm: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this (None: no clipping, norm still checked)."""


class GuardSettings(Strict):
    enabled: bool = True
    """Skip non-finite and spiking steps; roll back after repeated bad steps."""
    spike_factor: float = Field(5.0, gt=1)
    """A loss above spike_factor x the running mean of good losses is a spike."""
    min_history: int = Field(5, ge=1)
    """Good steps needed before spike detection starts."""
    max_bad_in_row: int = Field(3, ge=1)
    """This many skipped steps in a row roll back to the last good checkpoint."""
    rollback_lr_factor: float = Field(0.5, gt=0, le=1)
    """The learning rate is multiplied by this at each rollback."""
    max_rollbacks: int = Field(3, ge=0)
    """After this many rollbacks the run stops with an error (it is diverging)."""


class CheckpointSettings(Strict):
    every: int = Field(50, ge=1)
    """Save every this many optimizer steps (and at the end)."""
    keep_last: int = Field(2, ge=1)
    """Keep only the newest K checkpoints."""


class TrainSettings(Strict):
    steps: int = Field(ge=1)
    """Optimizer steps to run."""
    batch_size: int = Field(8, ge=1)
    """Conversations per micro-batch (packing changes their layout, not their number)."""
    grad_accum: int = Field(1, ge=1)
    """Micro-batches per optimizer step; the loss is normalised over all of them."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """bf16 autocast or plain fp32; "auto" = bf16 where the hardware runs it natively (GPU, AMX CPU)."""
    seed: int = 0
    """Seeds data order, initialisation of adapters and sampling."""
    threads: int | None = None
    """torch intra-op threads (None: torch's default)."""
    compile: bool = False
    """torch.compile each decoder layer (dynamic shapes): ~1 min once, then faster steps."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop early (with a checkpoint) once training has run this long in this process."""
    log_every: int = Field(1, ge=1)
    """Write metrics every this many steps."""
    loggers: list[Literal["tensorboard", "mlflow"]] = []
    """Extra metric sinks, used when their package is installed."""
    optim: OptimSettings = OptimSettings()
    """Optimizer (AdamW) and learning-rate schedule."""
    guard: GuardSettings = GuardSettings()
    """Anomaly guard: skip non-finite or spiking steps, roll back on repeated ones."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """How often checkpoints are written and how many are kept."""


class SFTConfig(Strict):
    """`temper sft CONFIG.yaml`: supervised fine-tuning on conversations."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path or hub id."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    data: DataSettings
    """Training, eval and replay data, and how it is rendered and packed."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints."""
    out: str = "runs"
    """Run root: each run writes runs/<name>/ and is recorded in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: sft-<timestamp>)."""


class TaskSourceSettings(Strict):
    """Where tasks come from: a built-in generator or task JSONL files."""

    source: str = "builtin:arithmetic"
    """`builtin:arithmetic`, `humaneval`, `reasoning_gym:<dataset>`, or a path to task JSONL."""
    n: int = Field(1000, ge=1)
    """Tasks to generate (generators) or the most to read (files)."""
    seed: int = 0
    """Seed of the built-in generators (the same seed gives the same tasks)."""
    ops: str = "+-*"
    """builtin:arithmetic only: which operations."""
    split: Literal["train", "heldout"] = "train"
    """builtin generators: which disjoint split."""
    split_by: Literal["parity", "hash"] = "parity"
    """builtin:arithmetic only: parity (even/odd operand sum; biases last digits) or hash (unbiased)."""
    phrasing: Literal["canonical", "varied", "reworded"] = "canonical"
    """builtin:arithmetic only: one template, varied training wordings, or held-out rewordings."""
    verifier: dict[str, Any] = {}
    """builtin:arithmetic only: fields merged over the tasks' verifier spec, e.g. {type: exact}."""


class RewardPart(Strict):
    """One weighted term of a composite reward."""

    name: str
    """Name of the term (its mean is logged under this name)."""
    weight: float = 1.0
    """Weight of the term in the reward's weighted sum."""
    verifier: dict[str, Any]
    """Merged over the task's own verifier spec, e.g. {type: exact} reuses the task's answer."""


class SamplingSettings(Strict):
    """How to sample: the one sampling config, shared by GRPO, held-out monitoring, eval
    suites and the engine. How many samples and which seed belong to one call
    (`SamplingParams`), not to a config."""

    temperature: float = Field(1.0, ge=0)
    """Softmax temperature; 0 is greedy decoding."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = Field(32, ge=1)
    """Most tokens generated per completion; a completion cut here is "truncated"."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end a completion; the tokenizer's eos always does."""
    stop: tuple[str, ...] = ()
    """Strings that end a completion (OpenAI's `stop`): the text is cut before the first one
    and `finish_reason` is "stop"; the token that completed it is the last token kept."""

    @field_validator("stop")
    @classmethod
    def _stop_strings_nonempty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("stop strings must be non-empty")
        return v

    def params(self, n: int = 1, seed: int | None = None) -> "SamplingParams":
        """The engine request for `n` samples per prompt under these settings."""
        return SamplingParams(**{k: getattr(self, k) for k in SamplingSettings.model_fields}, n=n, seed=seed)


class SamplingParams(SamplingSettings):
    """One `Engine.generate` request: the sampling settings plus samples per prompt and seed."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)
    n: int = Field(1, ge=1)
    """Samples per prompt."""
    seed: int | None = None
    """Seeds a private generator, so the same call gives the same samples (None: unseeded)."""
    top_logprobs: int = Field(0, ge=0, le=20)
    """Also record the k most likely tokens and their log-probs at each step (OpenAI's
    `top_logprobs`; 0: none), under the same distribution as `Completion.logprobs`."""
    grammar: str | None = None
    """Constrained decoding: an llguidance grammar every sample follows (`rollout/constrain.py`
    writes them from a JSON schema or lark text; the batching engine only)."""


class VLLMSettings(Strict):
    """vLLM engine options (GPU hosts only; `pip install 'tempering[vllm]'` there)."""

    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """Share of GPU memory vLLM may take (weights + KV cache); the trainer shares the GPU."""
    max_model_len: int = Field(2048, ge=16)
    """Longest prompt + completion vLLM serves (sizes its KV cache)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (a group's n samples, system prompts)."""
    verify_sync: bool = True
    """After each weight sync, read the weights back from vLLM and compare checksums."""


class EngineSettings(Strict):
    """Which `Engine` samples rollouts and evals (docs/inference.md)."""

    kind: Literal["hf", "batching", "vllm"] = "batching"
    """batching: continuous batching in this process (the default); hf: the static-batch
    HFEngine; vllm: vLLM on a CUDA GPU (refused with a message where vLLM or a GPU is absent)."""
    max_slots: int = Field(256, ge=1)
    """batching: most sequences decoded together (KV cache slots; a call allocates only what it needs)."""
    vllm: VLLMSettings = VLLMSettings()
    """vLLM options (kind: vllm only)."""


class GRPOSettings(SamplingSettings):
    """GRPO's rollout sampling (the `SamplingSettings` fields, temperature > 0) and its loss."""

    temperature: float = Field(1.0, gt=0)
    """Sampling temperature (> 0: the policy gradient needs samples); also the temperature
    at which the trainer recomputes log-probs."""
    prompts_per_step: int = Field(8, ge=1)
    """Groups (distinct prompts) in each rollout batch."""
    group_size: int = Field(8, ge=2)
    """Samples per prompt (G)."""
    scale_std: bool = True
    """Divide advantages by the group std (false: Dr. GRPO)."""
    clip_low: float = Field(0.2, ge=0)
    """Lower clip of the importance ratio: it is clipped below at 1 - clip_low."""
    clip_high: float = Field(0.28, ge=0)
    """Clip-higher (DAPO): the ratio is clipped to [1 - clip_low, 1 + clip_high]."""
    aggregation: Literal["token_mean", "seq_mean", "constant"] = "token_mean"
    """Loss reduction: over all valid tokens (DAPO), per sequence then over sequences (GRPO),
    or over batch x max_new_tokens (Dr. GRPO); see objectives/grpo_math.py."""
    beta: float = Field(0.0, ge=0)
    """KL weight to the reference (k3). Under LoRA the reference is the model with adapters off."""
    updates_per_batch: int = Field(1, ge=1)
    """mu: optimizer steps on each rollout batch (importance ratios use the rollout policy)."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards all match and refill the batch with new prompts."""
    max_refills: int = Field(2, ge=0)
    """Extra generation rounds per batch for dynamic sampling."""
    truncation: Literal["mask", "penalty", "keep"] = "penalty"
    """Responses cut by max_new_tokens: left out of the loss, rewarded `truncation_reward`, or kept."""
    truncation_reward: float = 0.0
    """Reward given to a truncated response under truncation "penalty"."""
    generation_chunks: int = Field(2, ge=1)
    """Generate each round in this many chunks; a finished chunk is scored while the next
    generates. 1 is fastest when verifiers are instant (one big decode batch)."""
    reward_workers: int = Field(4, ge=1)
    """Threads scoring completions (sandbox calls included) while generation goes on."""
    verifier_timeout_s: float = Field(30.0, gt=0)
    """A verifier slower than this is a verifier failure (the group is dropped), never a model failure."""
    rollout_ahead: bool = False
    """Sample the next batch while the trainer updates on this one (needs `scale:` engine replicas):
    one step stale (logged), corrected by the clipped importance ratio against the engine's log-probs."""
    max_logprob_mismatch: float | None = Field(None, gt=0)
    """Stop the run when a step's mean |log p_train - log p_rollout| exceeds this (None: only log it)."""


class HeldoutSettings(SamplingSettings):
    """Held-out monitoring during GRPO: sampling settings (greedy by default) and a schedule."""

    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of the held-out pass; 0 (greedy) makes it deterministic."""
    tasks: TaskSourceSettings | None = None
    """The held-out tasks; None: a seeded split of the training tasks (see `split_size`)."""
    split_size: int = Field(100, ge=1)
    """Without `tasks`: how many training tasks to hold out (at most a fifth of them), a
    seeded split disjoint from training, recorded in the run's heldout/split.json."""
    every: int = Field(10, ge=1)
    """Evaluate every this many steps, and at the start and end."""
    alarm_window: int = Field(3, ge=2)
    """Held-out evaluations compared for the divergence alarm."""


class ScaleSettings(Strict):
    """Scale-out on Ray (docs/scale.md): rollout engine replicas and reward workers as actors."""

    backend: Literal["ray"] = "ray"
    """The engine that places workers (Ray; training itself scales with torchrun)."""
    address: str | None = None
    """A running Ray cluster to join (e.g. `ray://head:10001` or `auto`); None starts a local one."""
    num_cpus: int = Field(2, ge=1)
    """CPUs of a local Ray instance started here (ignored when joining `address`)."""
    reward_workers: int = Field(2, ge=1)
    """Reward/verifier actors, each owning a sandbox pool of `sandbox_slots`."""
    sandbox_slots: int = Field(2, ge=1)
    """Sandbox slots (concurrent code runs) of each reward actor."""
    worker_cpus: float = Field(0.5, gt=0)
    """CPUs Ray reserves per reward actor."""
    engine_replicas: int = Field(1, ge=1)
    """Rollout engine actors; prompts are split between them (1: samples equal the in-process engine's)."""
    engine_gpus: float = Field(0.0, ge=0)
    """GPUs per engine replica (0 on CPU machines)."""
    max_retries: int = Field(3, ge=0)
    """Times a completion is re-sent after its reward worker died; then it is a verifier error."""


class GRPOConfig(Strict):
    """`temper grpo CONFIG.yaml`: RL with verifiable rewards."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path or hub id."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """The training tasks (prompts with a verifier spec)."""
    reward: list[RewardPart] | None = None
    """Composite reward built over each task's verifier; None: the task's verifier as is."""
    heldout: HeldoutSettings | None = HeldoutSettings()
    """Held-out monitoring during training; null turns it off."""
    grpo: GRPOSettings = GRPOSettings()
    """Rollout sampling, group size, dynamic sampling and the policy loss."""
    engine: EngineSettings = EngineSettings()
    """The engine that samples rollouts and held-out evals."""
    train: TrainSettings
    """Steps, micro-batches, precision, seed, optimizer, guard and checkpoints."""
    out: str = "runs"
    """Run root: each run writes runs/<name>/ and is recorded in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: grpo-<timestamp>)."""
    scale: ScaleSettings | None = None
    """Rollout engines and reward workers as Ray actors (docs/scale.md); None: in this process."""


class ConfigError(ValueError):
    """A config file or override that does not validate."""


# Config keys holding data paths. Relative paths written in a config file resolve against
# the file's directory (the config travels with its data); values given by `--set` or flags
# resolve against the working directory, like any command-line path.
PATH_KEYS = ("data.train", "data.eval", "data.replay.data", "tasks.source", "heldout.tasks.source")
# `tasks.source` values that name a built-in source, not a file.
_BUILTIN_SOURCE = ("builtin:", "humaneval", "reasoning_gym:")


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating levels as needed (a null level becomes one).

    Raises:
        ConfigError: the key is malformed or a level on its way holds a value, not a section.
    """
    parts = dotted.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"{dotted!r} is not a key (expected names joined by dots, e.g. train.steps)")
    *parents, leaf = parts
    node = data
    for depth, key in enumerate(parents):
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            where = ".".join(parents[: depth + 1])
            raise ConfigError(f"{where!r} is not a section (it holds {node!r})")
    node[leaf] = value


def _resolve_paths(data: dict, base: Path) -> None:
    """Rewrite the relative data paths of a config read from a file in directory `base`."""
    for dotted in PATH_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node[leaf]
        if isinstance(value, str):
            node[leaf] = _resolve_one(value, base, dotted)
        elif isinstance(value, list):
            node[leaf] = [_resolve_one(v, base, dotted) if isinstance(v, str) else v for v in value]


def _resolve_one(value: str, base: Path, dotted: str) -> str:
    if dotted.endswith("tasks.source") and value.startswith(_BUILTIN_SOURCE):
        return value
    path = Path(value).expanduser()
    return str(path) if path.is_absolute() else os.path.normpath(base / path)


def _override(data: dict, item: str) -> str:
    """Apply one `--set key.sub=value` (value parsed as YAML); returns the key.

    Errors name the argument as the user typed it, never the config file."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.sub=value")
    key, raw = (x.strip() for x in item.split("=", 1))
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"--set {item!r}: the value {raw!r} is not valid YAML ({problem}); "
                          "quote it, e.g. --set 'key=\"text\"'") from None
    try:
        set_dotted(data, key, value)
    except ConfigError as exc:
        raise ConfigError(f"--set {item!r}: {exc}") from None
    return key


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable YAML file ({exc})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def _blame(loc: tuple, given: dict[str, str], path: str | Path | None) -> str:
    """Who set the invalid value: the `--set` argument or flag covering `loc`, else the file."""
    dotted = ".".join(map(str, loc))
    for key, label in reversed(list(given.items())):
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return label
    return str(path) if path is not None else "config"


def load_config(model: type[Strict], path: str | Path | None, overrides: list[str] = (),
                literal: dict[str, Any] | None = None) -> Any:
    """Read YAML, apply `key.sub=value` overrides (values parsed as YAML), then `literal`
    values as given (flags such as a run name are strings, never YAML), and validate.

    Relative data paths (`PATH_KEYS`) in the file resolve against the file's directory;
    those given by overrides or flags are used as given (relative to the working directory).

    Raises:
        ConfigError: naming the file, or the `--set` argument, and every invalid or unknown key.
    """
    data: dict = {}
    if path is not None:
        data = _read_yaml(Path(path))
        _resolve_paths(data, Path(path).parent)
    given = {_override(data, item): f"--set {item!r}" for item in overrides}
    for key, value in (literal or {}).items():
        set_dotted(data, key, value)
        given[key] = f"the flag for {key} ({value!r})"
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [f"{_blame(e['loc'], given, path)}: {'.'.join(map(str, e['loc']))}: {e['msg']}"
                 for e in exc.errors()]
        raise ConfigError(lines[0] if len(lines) == 1 else "invalid config:\n  " + "\n  ".join(lines)) from None


class EvalConfig(Strict):
    """`temper eval run [SUITES] --config EVAL.yaml`: suites on a model (flags override the file)."""

    suites: list[str] = Field(min_length=1)
    """Suite names (built-in or user suite directories) or suite YAML paths."""
    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, run output (runs/NAME/final), .gguf."""
    out: str
    """Directory for results.json, samples.jsonl and report.html."""
    seeds: int | None = Field(None, ge=1)
    """Sampling seeds, each a full repeat of every suite (None: each suite's own)."""
    first_seed: int = Field(0, ge=0)
    """The seeds are first_seed .. first_seed + seeds - 1."""
    samples: int | None = Field(None, ge=1)
    """Samples per task per seed (None: each suite's own); pass@k needing more is skipped with a note."""
    limit: int | None = Field(None, ge=1)
    """At most this many tasks per task source (a subset, so its own suite hash)."""
    cache: bool = True
    """Reuse results cached under <tempering cache>/evals for the same model, suite and settings."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads (None: torch's default)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    engine: EngineSettings = EngineSettings()
    """The engine that samples the suites."""
    quantize: Literal["none", "int8"] = "none"
    """int8: evaluate the weight-only int8 copy of the model (what `temper serve --quantize int8`
    serves), so the gate can compare it with the float model."""
    scale: ScaleSettings | None = None
    """Ray (docs/scale.md): sample on engine replicas and score on reward actors (each with its
    own sandbox pool) instead of in this process; same samples and scores with one replica."""


# --- dedup ---
class DedupSettings(Strict):
    """`temper data dedup`: exact and near-duplicate removal (see `data.dedup`)."""

    threshold: float = Field(0.8, gt=0.0, le=1.0)
    """Near duplicates: rows whose word-shingle Jaccard similarity is at least this."""
    num_perm: int = Field(128, ge=2)
    """MinHash permutations (LSH proposes candidates; each is checked with exact Jaccard)."""
    shingle: int = Field(5, ge=1)
    """Words per shingle."""
    seed: int = 1
    """MinHash seed; same input and seed give the same output."""
    near: bool = True
    """Also remove near duplicates (False: exact duplicates only)."""


class DecontamSettings(Strict):
    """`temper data decontam`: the n-gram contamination rule (see `evals.contamination`)."""

    n: int = Field(13, ge=1)
    """Gram length in words (tasks shorter than n are one gram of their full length)."""
    min_coverage: float = Field(0.5, gt=0.0, le=1.0)
    """A row contains a task when it holds at least this share of the task's distinct indexed grams."""
    boilerplate_tasks: int = Field(3, ge=2)
    """Grams shared by this many suite tasks or more are boilerplate and not indexed."""
# --- mix ---


class MixSourceSettings(Strict):
    """One source of a data mix."""

    name: str = Field(min_length=1)
    """Name of the source in reports and the registry (unique within the mix)."""
    data: Paths = Field(min_length=1)
    """Its files (JSONL / JSON / Parquet / saved dataset dir); rows of any kind."""
    track: Literal["general", "reasoning", "code", "agent", "safety"] = "general"
    """The capability track the source feeds (shares are also reported per track)."""
    weight: float = Field(1.0, gt=0)
    """Relative weight among the non-replay sources (normalised to their share)."""
    max_epochs: float | None = Field(4.0, gt=0)
    """Upsampling cap: at most this many times the source's size per mix (None: no cap)."""


class MixReplaySettings(Strict):
    """General data replayed into the mix as a forgetting guard."""

    data: Paths = Field(min_length=1)
    """General-data files."""
    ratio: float = Field(0.1, gt=0.0, lt=1.0)
    """Share of the whole mix (rows or tokens, as `by`) taken by replay."""
    name: str = "replay"
    """Name of the replay source in reports."""
    max_epochs: float | None = Field(4.0, gt=0)
    """Upsampling cap of the replay data (None: no cap)."""


class MixConfig(Strict):
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
    epoch: int = Field(0, ge=0)
    """Mix epoch: epoch e continues each source's walk where epoch e-1 stopped."""
    tolerance: float = Field(0.01, gt=0, lt=1)
    """Largest accepted |realised - effective share|; beyond it the command fails."""
    output: str | None = None
    """Where the mixed JSONL goes (default: runs/<name>/mix.jsonl)."""
    out: str = "runs"
    """Run root: the mix is recorded as a run in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: mix-<timestamp>)."""


class StratifyConfig(Strict):
    """`temper data stratify CONFIG.yaml`: measured pass rates -> difficulty buckets -> an RL set."""

    model: str = DEFAULT_MODEL
    """Model whose pass rates are measured."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """The tasks to stratify."""
    k: int = Field(8, ge=1)
    """Samples per task for the pass-rate estimate."""
    sampling: SamplingSettings = SamplingSettings()
    """Sampling of the k samples (temperature > 0 for a spread)."""
    too_easy: float = Field(1.0, gt=0, le=1)
    """Pass rate at or above which a task is mastered (dropped from the RL set)."""
    too_hard: float = Field(0.0, ge=0, lt=1)
    """Pass rate at or below which a task is out of reach (dropped from the RL set)."""
    order: Literal["curriculum", "shuffle", "source"] = "curriculum"
    """Order of the RL set: easy to hard, seeded shuffle, or as the tasks came."""
    seed: int = 0
    """Sampling seed (and shuffle seed)."""
    batch_prompts: int = Field(32, ge=1)
    """Prompts per generation batch."""
    reward_workers: int = Field(4, ge=1)
    """Threads scoring completions."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads (None: torch's default)."""
    out: str = "runs"
    """Run root: writes runs/<name>/{stratified,rl_set}.jsonl and report.json."""
    name: str | None = None
    """Run name (default: stratify-<timestamp>)."""


class FeedbackConfig(Strict):
    """The pipeline's `feedback` stage: failed eval cases, served bad cases and votes -> next round's data."""

    evals: Paths = []
    """Eval run dirs, their results.json or samples.jsonl: failed samples are clustered and mined."""
    served: Paths = []
    """Bad-case JSONL from `temper feedback export` (thumbs down, reports, corrections)."""
    votes: Paths = []
    """Preference pairs from `temper arena export` (with votes), passed on as pairs."""
    pool: TaskSourceSettings | None = None
    """Training tasks to mine near neighbours of failed prompts from (None: no mining)."""
    per_failure: int = Field(2, ge=1)
    """Pool tasks mined per failed prompt (nearest by character n-gram TF-IDF)."""
    max_tasks: int = Field(2000, ge=1)
    """Most tasks written."""
    clusters: int | None = Field(None, ge=1)
    """Failure clusters (None: chosen by silhouette)."""
    seed: int = 0
    """Seed of the clustering."""
    out: str = "runs"
    """Run root."""
    name: str | None = None
    """Run name (default: feedback-<time>)."""


class SynthConfig(Strict):
    """`temper data synth CONFIG.yaml`: the flywheel, generate -> verify -> keep the best -> SFT set."""

    model: str = DEFAULT_MODEL
    """Generator model."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """Prompts with their verifiers."""
    n: int = Field(8, ge=1)
    """Candidates generated per prompt."""
    sampling: SamplingSettings = SamplingSettings()
    """Sampling of the candidates."""
    reflow: Literal["none", "final_answer"] = "none"
    """Rewrite a verified answer into the asked form: `final_answer` keeps only the verifier's
    extracted final answer (when the rewrite still verifies); recorded in the row's provenance."""
    min_score: float = Field(1.0, ge=0)
    """A candidate is kept only when it passed and its reward is at least this."""
    pairs: bool = False
    """Also write preference pairs (best correct vs a failed candidate of the same prompt)."""
    seed: int = 0
    """Sampling seed."""
    batch_prompts: int = Field(32, ge=1)
    """Prompts per generation batch."""
    reward_workers: int = Field(4, ge=1)
    """Threads scoring completions."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads (None: torch's default)."""
    out: str = "runs"
    """Run root: writes runs/<name>/{sft,failures,pairs}.jsonl and report.json."""
    name: str | None = None
    """Run name (default: synth-<timestamp>)."""


# --- dpo ---
class PreferenceDataSettings(Strict):
    """Preference pairs (`prompt`/`chosen`/`rejected` rows, see data/preference.py) and how they render."""

    train: Paths
    """Training pair files (JSONL, JSON, Parquet or a saved dataset)."""
    eval: Paths = []
    """Held-out pair files: loss and reward accuracy reported before and after training."""
    max_length: int = Field(1024, ge=8)
    """Longest prompt + answer (the longer side) in tokens; longer pairs are quarantined, never cut."""
    tool_call_style: Literal["auto", "template", "tempering"] = "auto"
    """How tool calls are written: detected from the template ("auto"), or forced."""


class PreferenceSettings(Strict):
    """The preference loss (objectives/preference.py) and where its reference comes from."""

    loss: Literal["dpo", "ipo", "simpo"] = "dpo"
    """dpo: sigmoid DPO (cDPO with label_smoothing); ipo: IPO; simpo: SimPO (reference-free)."""
    beta: float = Field(0.1, gt=0)
    """DPO/SimPO inverse temperature; IPO's tau (the target margin is 1 / (2 tau))."""
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    """cDPO / SimPO: assumed probability that a pair's label is flipped."""
    simpo_gamma: float = Field(0.5, ge=0)
    """SimPO's target reward margin gamma."""
    sft_weight: float = Field(0.0, ge=0)
    """Weight of an added per-token NLL term on the chosen answer (RPO); 0 turns it off."""
    reference: Literal["cache", "online"] = "cache"
    """cache: reference log-probs computed once before training and cached on disk under a
    content hash of (model, tokenizer, data, precision); online: under LoRA, recomputed each
    step with adapters disabled."""


class DPOConfig(Strict):
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
    out: str = "runs"
    """Run root: each run writes runs/<name>/ and is recorded in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: dpo-<timestamp>)."""


# --- agree ---
BARE_NUMBER_PATTERN = r"^\s*[-+]?\d[\d,]*(?:\.\d+)?\s*$"
"""A reply that is only a number (the strict format the arithmetic prompts ask for)."""


class PairSampling(SamplingSettings):
    """How pair candidates are sampled (the `SamplingSettings` fields; temperature > 0)."""

    temperature: float = Field(1.0, gt=0)
    """Sampling temperature (> 0: a task needs differing samples to yield a pair)."""
    max_new_tokens: int = Field(16, ge=1)
    """Most tokens per candidate; a truncated candidate may be rejected, never chosen."""


class PairsConfig(Strict):
    """`temper data pairs`: verifier-built preference pairs from a model's own samples."""

    model: str = DEFAULT_MODEL
    """Model spec of the generator: alias, HF dir, run output, .gguf."""
    tasks: TaskSourceSettings = TaskSourceSettings(n=400)
    """The tasks whose prompts are sampled (their verifier decides which sample is correct)."""
    sampling: PairSampling = PairSampling()
    """Sampling settings of the candidates."""
    k: int = Field(8, ge=2)
    """Candidates sampled per task."""
    seed: int = 0
    """Sampling seed (chunk i samples under seed + i) and the seed of the pair choice."""
    kinds: list[Literal["correct", "strict"]] = Field(default_factory=lambda: ["correct", "strict"], min_length=1)
    """Pair kinds: `correct` = a verified-correct sample over an incorrect one; `strict` = a
    correct reply in the strict format over a sloppy (correct but unformatted) or incorrect one."""
    strict: list[dict[str, Any]] = Field(default_factory=lambda: [
        {"type": "exact"}, {"type": "regex", "on": "completion", "pattern": BARE_NUMBER_PATTERN}])
    """Verifier specs (each merged over the task's own spec) that a strict reply passes, all of them.
    Default: the exact answer and nothing but a number."""
    reformat: bool = True
    """When no sample of a task is strict, build the strict reply from a verified-correct sample's
    own final answer (reduced to the bare number, re-verified); marked `chosen_origin: reformatted`."""
    pairs_per_kind: int = Field(2, ge=1)
    """Most pairs of each kind per task (each with a different rejected sample)."""
    chunk_tasks: int = Field(32, ge=1)
    """Tasks per generation batch (progress advances per batch)."""
    output: str
    """The pair JSONL file to write (replaced)."""
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads (None: torch's default)."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """auto: bf16 only where it is native, else fp32."""
    out: str = "runs"
    """Run root: the generation is recorded in runs/registry.sqlite like any run."""
    name: str | None = None
    """Run name (default: pairs-<timestamp>)."""
# --- rm ---
class RMDataSettings(Strict):
    """Preference pairs for a reward model (the pair row contract, see data/preference.py)."""

    train: Paths
    """Pair files (JSONL / JSON / Parquet) to train on."""
    eval: Paths = []
    """Held-out pair files; empty: hold out `eval_share` of the training prompts instead."""
    eval_share: float = Field(0.2, ge=0.0, lt=1.0)
    """Without `eval`: share of distinct prompts (all their pairs) held out, seeded by train.seed."""
    max_length: int = Field(512, ge=8)
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
    center_coef: float = Field(0.0, ge=0.0)
    """Weight of the (r_chosen + r_rejected)^2 term that keeps scores centred on 0."""
    eval_batch_size: int = Field(16, ge=1)
    """Pairs per forward when scoring the held-out set."""
    bootstrap_resamples: int = Field(2000, ge=100)
    """Bootstrap resamples of the held-out accuracy's confidence interval."""


class BestOfNSettings(SamplingSettings):
    """Best-of-n after training: sample n answers per task, pick the highest reward-model score."""

    temperature: float = Field(0.7, gt=0)
    """Sampling temperature of the n candidates (> 0, or all n would be the same)."""
    policy: str = DEFAULT_MODEL
    """The model that samples the candidates."""
    tasks: TaskSourceSettings = TaskSourceSettings(split="heldout", n=100)
    """Tasks to answer; their own verifier judges the picked answer (the RM never sees it)."""
    n: int = Field(8, ge=2)
    """Candidates per task."""
    seed: int = 0
    """Sampling seed."""


class RMConfig(Strict):
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
    out: str = "runs"
    """Run root: each run writes runs/<name>/ and is recorded in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: rm-<timestamp>)."""


PATH_KEYS = (*PATH_KEYS, "best_of_n.tasks.source")


# --- pipe ---
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


class ReleaseStageConfig(Strict):
    """A `release` stage: promote a checkpoint whose gate passed (pipeline/releases.py)."""

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


# --- merge ---
from pydantic import model_validator  # noqa: E402  (kept in this block: the top import line is shared)


class MergeConfig(Strict):
    """`temper merge CONFIG.yaml`: merge LoRA adapters (PEFT) or full models (mergekit) into one."""

    inputs: Paths = Field(min_length=1)
    """Models to merge: all LoRA adapter dirs over one base (`runs/NAME/final`), or all full HF dirs."""
    weights: list[float] | None = None
    """One weight per input (None: 1/len(inputs) each); adapters: PEFT's weights, full models: mergekit's."""
    method: Literal["linear", "cat", "svd", "ties", "dare_linear", "dare_ties", "task_arithmetic"] = "linear"
    """Adapters: a PEFT combination type (not task_arithmetic); full models: a mergekit method (not cat, svd)."""
    density: float | None = Field(None, gt=0.0, le=1.0)
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
    out: str = "runs"
    """Run root: writes runs/<name>/final and records the merge in runs/registry.sqlite."""
    name: str | None = None
    """Run name (default: merge-<timestamp>)."""

    @model_validator(mode="after")
    def _weights_match(self) -> "MergeConfig":
        if self.weights is not None and len(self.weights) != len(self.inputs):
            raise ValueError(f"weights has {len(self.weights)} values for {len(self.inputs)} inputs; give one per input")
        return self
