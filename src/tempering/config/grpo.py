"""`temper grpo`: RL with verifiable rewards (task sources, reward parts, the GRPO family)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from tempering import algorithms
from tempering.config.base import DEFAULT_MODEL, RunSettings, Strict, Threads
from tempering.config.domains import DomainSettings, MixtureSettings, check_domains
from tempering.config.longctx import RopeScalingSetting
from tempering.config.sampling import EngineSettings, SamplingSettings, ScaleSettings
from tempering.config.tasks import TaskSourceSettings
from tempering.config.train import ChatTemplateSetting, LoraSettings, TrainSettings
from tempering.deadlines import DEFAULT_GRACE_S
from tempering.errors import UserError

MISMATCH_METRICS = ("logprob_mismatch", "logprob_mismatch_p99", "mismatch_kl")
"""The train-vs-rollout figures every GRPO and agent step logs (`objectives/mismatch.py` computes
them): mean and 99th percentile of |log p_train - log p_rollout| on sampled tokens, and the k3
estimate of KL(rollout || train) there. A `mismatch_budget` may bound any of them."""


def check_mismatch_budget(value: Any) -> Any:
    """A budget is a mapping from logged figures to positive bounds; anything else is refused in one line."""
    names = ", ".join(MISMATCH_METRICS)
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise ValueError(
            f"mismatch_budget {value!r} names no metric to read; give a bound per figure, "
            f"e.g. {{logprob_mismatch: {value if isinstance(value, (int, float)) else 0.05}}} (figures: {names})"
        )
    for name, bound in value.items():
        if name not in MISMATCH_METRICS:
            raise ValueError(f"mismatch_budget names {name!r}, which no step logs (figures: {names})")
        if not isinstance(bound, (int, float)) or isinstance(bound, bool) or bound <= 0:
            raise ValueError(f"mismatch_budget.{name} must be a number > 0, not {bound!r}")
    return {k: float(v) for k, v in value.items()}


class RewardPart(Strict):
    """One weighted term of a composite reward."""

    name: str
    """Name of the term (its mean is logged under this name)."""
    weight: float = 1.0
    """Weight of the term in the reward's weighted sum."""
    verifier: dict[str, Any]
    """Merged over the task's own verifier spec, e.g. {type: exact} reuses the task's answer."""


class OffPolicySettings(Strict):
    """Truncated or masked importance sampling on the trainer-vs-rollout log-prob ratio
    (`objectives/off_policy.py`): corrects for an engine that samples from other numbers than
    the trainer computes (another precision or kernel, stale weights)."""

    mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "token_truncate"
    """token_truncate (TIS): each token's weight min(w, cap); token_mask (MIS): 0 outside [floor, cap];
    sequence_*: the same on the sequence's ratio (product over its tokens), for every token of it."""
    cap: float = Field(default=2.0, gt=0)
    """Upper bound of the ratio p_trainer / p_rollout (> 0; TIS papers use 2)."""
    floor: float | None = Field(default=None, gt=0)
    """Lower bound (mask modes mask below it, truncate modes raise to it); None: no lower bound."""

    @model_validator(mode="after")
    def _floor_below_cap(self) -> OffPolicySettings:
        if self.floor is not None and self.floor >= self.cap:
            raise ValueError(f"floor {self.floor} must be below cap {self.cap}")
        return self


def registered(family: algorithms.Family, value: str, info: ValidationInfo) -> str:
    """`value` if it names a built-in or registered algorithm of `family`, or the section names
    `plugins` (which may register it), else a one-line error listing the names. Imports nothing:
    the plug-ins load, and a name they do not register is refused, when the run starts
    (`UsesAlgorithms.load_algorithms`)."""
    algorithms.check_name(family, value, info.data.get("plugins", []))
    return value


class UsesAlgorithms(Strict):
    """A section naming registered algorithms (`algorithm_fields`: field -> family) and the
    `plugins` modules that may register more: validated without importing them."""

    algorithm_fields: ClassVar[dict[str, algorithms.Family]] = {}

    @field_validator("plugins", check_fields=False)
    @classmethod
    def _plugins_are_module_names(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if not algorithms.is_module_name(m)]
        if bad:
            raise ValueError(f"plugin {bad[0]!r} is not a module name (dotted words on the path), not a path")
        return value

    def load_algorithms(self) -> None:
        """Import the plug-ins and resolve every named algorithm (when the run starts).

        Raises:
            UserError: a plug-in does not import, or a name is registered nowhere (one line).
        """
        plugins = getattr(self, "plugins", [])
        algorithms.load(plugins)
        for field, family in self.algorithm_fields.items():
            name = getattr(self, field)
            if name is not None:
                try:
                    algorithms.lookup(family, name, plugins)
                except UserError as exc:
                    raise UserError(f"{field}: {exc}") from None


def load_algorithms(cfg: BaseModel, where: str = "") -> None:
    """`load_algorithms` of every `UsesAlgorithms` section of `cfg` (a run's first step: a
    plug-in's code runs here, never while a config validates); errors name the section."""
    if isinstance(cfg, UsesAlgorithms):
        try:
            cfg.load_algorithms()
        except UserError as exc:
            raise UserError(f"{where}{exc}") from None
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                load_algorithms(item, f"{where}{name}.{f'{i}.' if isinstance(value, list) else ''}")


def check_stale_safe(loss: str) -> None:
    """Refuse, in one line naming the allowed ones, a policy loss not registered `stale_safe` (it has
    no trust region or importance correction for samples of an older policy); a plug-in's loss not
    imported yet passes here and is checked when the run starts (`GRPOSettings.load_algorithms`)."""
    if algorithms.is_stale_safe(loss) is False:
        allowed = ", ".join(algorithms.stale_safe_losses())
        raise UserError(
            f"loss {loss!r} is not safe for stale samples with max_off_policy_steps > 0: it has no trust "
            f"region or importance correction (stale-safe losses: {allowed})"
        )


class GRPOPolicySettings(UsesAlgorithms, SamplingSettings):
    """What single- and multi-turn GRPO share: group sampling (the `SamplingSettings` fields,
    temperature > 0), the policy loss and the train/rollout mismatch bound. Agent RL composes
    exactly these (`agents.config.AgentRLSettings`); `GRPOSettings` adds the single-turn rollout's."""

    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature (> 0: the policy gradient needs samples); also the temperature
    at which the trainer recomputes log-probs."""
    prompts_per_step: int = Field(default=8, ge=1)
    """Groups (distinct prompts) in each rollout batch."""
    group_size: int = Field(default=8, ge=2)
    """Samples per prompt (G)."""
    plugins: list[str] = []
    """Modules to import before `loss` and `advantage` are looked up and before the tasks load:
    each registers its own algorithms (`@register_policy_loss`, `@register_advantage`; docs/rl.md)
    or verifiers (`@register`; docs/verifiers.md) on import."""
    loss: str = "dapo"
    """Registered policy loss (`tempering.algorithms`): grpo, dapo, dr_grpo, bnpo, gspo, cispo, or a
    plug-in's; each brings its aggregation (docs/rl.md)."""
    advantage: str = "grpo"
    """Registered advantage estimator: grpo (group mean and std), dr_grpo (group mean only), rloo,
    reinforce_pp, reinforce_pp_baseline, or a plug-in's."""
    clip_low: float = Field(default=0.2, ge=0)
    """Lower clip of the importance ratio: it is clipped below at 1 - clip_low."""
    clip_high: float = Field(default=0.28, ge=0)
    """Clip-higher (DAPO): the ratio is clipped to [1 - clip_low, 1 + clip_high] (CISPO: the weight
    is capped at 1 + clip_high)."""
    aggregation: Literal["token_mean", "seq_mean", "constant", "micro_token_mean"] | None = None
    """Loss reduction, overriding the loss's own: over all valid tokens (DAPO), per sequence then over
    sequences (GRPO), over batch x max_new_tokens (Dr. GRPO), or per micro-batch (BNPO);
    see objectives/grpo_math.py. None: the registered loss's."""
    beta: float = Field(default=0.0, ge=0)
    """KL weight to the reference (k3). Under LoRA the reference is the model with adapters off."""
    off_policy: OffPolicySettings | None = None
    """TIS / MIS weights on the trainer-vs-rollout ratio (docs/rl.md); None: no correction."""
    updates_per_batch: int = Field(default=1, ge=1)
    """mu: optimizer steps on each rollout batch (importance ratios use the rollout policy)."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards all match (single-turn GRPO refills the batch with new prompts)."""
    algorithm_fields = {"loss": "policy_loss", "advantage": "advantage"}

    mismatch_budget: dict[str, float] | None = None
    """Stop the run when a step's train-vs-rollout mismatch exceeds its budget: a bound per logged
    figure, e.g. {logprob_mismatch: 0.05, mismatch_kl: 0.001} (figures: `MISMATCH_METRICS`;
    docs/correctness.md); None: the figures are only logged."""

    @field_validator("mismatch_budget", mode="before")
    @classmethod
    def _budget_names_its_metrics(cls, value: Any) -> Any:
        return check_mismatch_budget(value)

    @field_validator("loss")
    @classmethod
    def _loss_is_registered(cls, value: str, info: ValidationInfo) -> str:
        return registered("policy_loss", value, info)

    @field_validator("advantage")
    @classmethod
    def _advantage_is_registered(cls, value: str, info: ValidationInfo) -> str:
        return registered("advantage", value, info)


class GRPOSettings(GRPOPolicySettings):
    """Single-turn GRPO: the shared group sampling and loss (`GRPOPolicySettings`), plus the
    rollout's refills, truncation policy, chunked scoring and sampling ahead."""

    max_refills: int = Field(default=2, ge=0)
    """Extra generation rounds per batch for dynamic sampling."""
    truncation: Literal["mask", "penalty", "keep"] = "penalty"
    """Responses cut by max_new_tokens: left out of the loss, rewarded `truncation_reward`, or kept."""
    truncation_reward: float = 0.0
    """Reward given to a truncated response under truncation "penalty"."""
    overlong_buffer: int | None = Field(default=None, ge=1)
    """DAPO's soft overlong punishment: a response longer than max_new_tokens - overlong_buffer
    loses reward linearly, down to -overlong_penalty at max_new_tokens. None: off."""
    overlong_penalty: float = Field(default=1.0, gt=0)
    """The most reward the soft overlong punishment takes (at max_new_tokens)."""
    generation_chunks: int = Field(default=2, ge=1)
    """Generate each round in this many chunks; a finished chunk is scored while the next
    generates. 1 is fastest when verifiers are instant (one big decode batch)."""
    reward_workers: int = Field(default=4, ge=1)
    """Threads scoring completions (sandbox calls included) while generation goes on."""
    verifier_timeout_s: float = Field(default=30.0, gt=0)
    """A verifier slower than this is a verifier failure (the group is dropped), never a model failure."""
    hang_grace_s: float = Field(default=DEFAULT_GRACE_S, gt=0)
    """Seconds past a worker's own deadline (`verifier_timeout_s`, `scale.engine_deadline_s`,
    `scale.reward_deadline_s`, `sampler.call_timeout_s` on a replacement) before the run stops with one line naming the stuck worker, the
    step and what it was doing (docs/scale.md, No silent hangs)."""
    max_off_policy_steps: int = Field(default=0, ge=0)
    """K, the staleness bound: a sampled token may train up to K optimizer steps after the weights
    that sampled it. 0: synchronous (sample, then update). K > 0: asynchronous, up to K batches
    sample ahead while the trainer updates (needs an engine with its own weights: `sampler:` or
    `scale:`), corrected by the importance ratio against the engine's log-probs; the loss must be
    `stale_safe` (docs/rl.md, Asynchronous RL)."""
    stale: Literal["drop", "resample"] = "drop"
    """A group with a token staler than the bound when it would train: dropped whole (counted,
    `stale_dropped_groups`); `resample` (a fresh group instead) is refused until a source can."""

    partial_rollouts: bool = False
    """Generate in segments of `segment_tokens` new tokens; between segments the engine may take
    newer weights (`RolloutSource.newer_weights`), so a generation in flight when weights are
    published goes on under them, each token keeping the version that sampled it (docs/rl.md,
    Partial rollouts). Needs max_off_policy_steps >= 1 and an engine with its own copy of the
    weights (`sampler:`, a local engine process, or `scale:` engine replicas)."""
    segment_tokens: int = Field(default=64, ge=1)
    """With partial_rollouts: new tokens per segment (the engine's weights can change only between segments)."""
    sync_check_every: int = Field(default=10, ge=1)
    """Steps between weight-sync checks: at the first sync after the first weight change, then at the
    first sync at least this many steps after the last check, the engine's log-probs of a small
    sample (2 x 8 tokens) are replayed through the trainer at the synced version; a gap past the
    replay epsilon stops the run (docs/correctness.md). Engines that share the trainer's model
    (in-process hf, batching, speculative) have nothing to compare and are not checked."""

    @model_validator(mode="before")
    @classmethod
    def _rollout_ahead_retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and "rollout_ahead" in data:
            k = 1 if data["rollout_ahead"] else 0
            raise ValueError(f"grpo.rollout_ahead is now grpo.max_off_policy_steps: {k} (the staleness bound)")
        return data

    @model_validator(mode="after")
    def _off_policy_steps_fit(self) -> GRPOSettings:
        k = self.max_off_policy_steps
        if k > 0 and self.updates_per_batch > 1:
            raise ValueError(
                f"max_off_policy_steps {k} with updates_per_batch {self.updates_per_batch}: both reuse samples "
                "of an older policy and their staleness would add up; use one of them"
            )
        if "stale" in self.model_fields_set and k == 0:
            raise ValueError("stale does nothing with max_off_policy_steps 0 (every sample trains fresh)")
        if self.stale == "resample":
            raise ValueError("stale: resample is not supported by the single-turn rollout yet; use stale: drop")
        if k > 0:
            check_stale_safe(self.loss)
        if "segment_tokens" in self.model_fields_set and not self.partial_rollouts:
            raise ValueError("segment_tokens does nothing with partial_rollouts off")
        if self.partial_rollouts and k == 0:
            raise ValueError(
                "partial_rollouts does nothing with max_off_policy_steps 0 (no weights are published while "
                "a batch generates); set max_off_policy_steps: 1"
            )
        return self

    def load_algorithms(self) -> None:
        super().load_algorithms()
        if self.max_off_policy_steps > 0:  # a plug-in's loss is known now
            check_stale_safe(self.loss)

    @model_validator(mode="after")
    def _overlong_buffer_fits(self) -> GRPOSettings:
        if self.overlong_buffer is not None and self.overlong_buffer >= self.max_new_tokens:
            raise ValueError(
                f"overlong_buffer {self.overlong_buffer} must be below max_new_tokens {self.max_new_tokens}"
            )
        if "overlong_penalty" in self.model_fields_set and self.overlong_buffer is None:
            raise ValueError("overlong_penalty does nothing without overlong_buffer")
        return self


HELDOUT_EVERY = 10
"""GRPO's `train.eval_every` when the config has `heldout:` and sets none."""


SAMPLER_ENGINES = ("batching", "hf")
"""The engine kinds `sampler:`'s engine process runs (vLLM has its own process; speculative: not yet)."""


class SamplerSettings(Strict):
    """The rollout engine in a process of its own on this machine (`scale/process_engine.py`): the
    run's `engine:` (batching by default, or hf) on its own copy of the model, synced from the trainer, so batches can sample while the
    trainer updates (`grpo.max_off_policy_steps` > 0) without Ray."""

    threads: Threads = "auto"
    """torch intra-op threads of the engine process: "auto" (the cores free when it starts), a
    count, or null (torch's default). The trainer's are `train.threads`."""
    call_timeout_s: float = Field(default=600.0, gt=0)
    """Deadline of each call to the engine process (a generation, a weight sync); past it (or at
    the process's death) the process is killed, a fresh one is given the last synced weights and
    the call again, with the same seed; if that one fails too, the run stops, naming the call."""
    start_timeout_s: float = Field(default=300.0, gt=0)
    """Deadline for the engine process to load the model and answer."""


class HeldoutSettings(SamplingSettings):
    """Held-out monitoring during GRPO: which tasks and the sampling settings (greedy by default);
    how often is `train.eval_every` (default 10 here), as for every objective."""

    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature of the held-out pass; 0 (greedy) makes it deterministic."""
    tasks: TaskSourceSettings | None = None
    """The held-out tasks; None: a seeded split of the training tasks (see `split_size`)."""
    split_size: int = Field(default=100, ge=1)
    """Without `tasks`: how many training tasks to hold out (at most a fifth of them), a
    seeded split disjoint from training, recorded in the run's heldout/split.json."""
    alarm_window: int = Field(default=3, ge=2)
    """Held-out evaluations compared for the divergence alarm."""

    @model_validator(mode="before")
    @classmethod
    def _every_moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "every" in data:
            raise ValueError(
                "heldout.every moved to train.eval_every (one schedule for every objective's held-out measure)"
            )
        return data


class GRPOConfig(ChatTemplateSetting, RopeScalingSetting, RunSettings):
    """`temper grpo CONFIG.yaml`: RL with verifiable rewards."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path or hub id."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    tasks: TaskSourceSettings = TaskSourceSettings()
    """The training tasks (prompts with a verifier spec); with `domains:`, leave it out."""
    domains: list[DomainSettings] | None = None
    """A task mixture by domain (docs/multidomain.md): each with its tasks, prior weight and held-out
    tasks; per-domain metrics every step. None: one domain, `tasks`."""
    mixture: MixtureSettings | None = None
    """With `domains`: priority sampling by learnability and the domains' health checks; None: the defaults."""
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
    scale: ScaleSettings | None = None
    """Rollout engines and reward workers as Ray actors (docs/scale.md); None: in this process."""
    sampler: SamplerSettings | None = None
    """The rollout engine (`engine:`, batching or hf) in a local process of its own (asynchronous RL
    without Ray; docs/rl.md); None: `engine:` in this process (or `scale:`'s replicas)."""

    @model_validator(mode="after")
    def _domains_fit(self) -> GRPOConfig:
        check_domains(self.domains, self.mixture, "tasks" in self.model_fields_set)
        if self.domains and self.heldout is not None and self.heldout.tasks is not None:
            raise ValueError("heldout.tasks does nothing with domains: (each domain's own heldout: is scored)")
        return self

    @model_validator(mode="after")
    def _heldout_schedule(self) -> GRPOConfig:
        if self.heldout is None and self.train.eval_every is not None:
            raise ValueError("train.eval_every measures the held-out tasks, and heldout: is null")
        if self.heldout is not None and self.train.eval_every is None:
            self.train.eval_every = HELDOUT_EVERY
        return self

    @model_validator(mode="after")
    def _engine_holds_its_own_weights(self) -> GRPOConfig:
        in_process = self.scale is None and self.sampler is None and self.engine.kind != "vllm"
        if in_process and self.grpo.partial_rollouts:
            raise ValueError(
                f"grpo.partial_rollouts needs an engine that takes a weight sync mid-generation and reports "
                f"per-token log-probs of its own weights; engine kind {self.engine.kind!r} samples from the "
                "trainer's own model: use sampler: (a local engine process) or scale: engine replicas"
            )
        if in_process and "sync_check_every" in self.grpo.model_fields_set:
            raise ValueError(
                f"grpo.sync_check_every does nothing with engine kind {self.engine.kind!r}: it samples from the "
                "trainer's own model, so there is no synced copy to check (use sampler:, scale: engine replicas or vllm)"
            )
        return self

    @model_validator(mode="after")
    def _engine_is_not_ignored_under_scale(self) -> GRPOConfig:
        if self.scale is not None and "engine" in self.model_fields_set:
            raise ValueError(
                "engine: does nothing with scale: (the Ray replicas sample with HFEngine); drop one of them"
            )
        if self.sampler is not None and self.scale is not None:
            raise ValueError("sampler: does nothing with scale: (the Ray replicas are the engine); drop one of them")
        if self.sampler is not None and self.engine.kind not in SAMPLER_ENGINES:
            raise ValueError(
                f"engine.kind {self.engine.kind!r} does not run in sampler:'s engine process "
                f"(it runs {' or '.join(SAMPLER_ENGINES)}); pick one of those or drop sampler:"
            )
        return self

    @model_validator(mode="after")
    def _reward_deadline_under_the_verdict_wait(self) -> GRPOConfig:
        if self.scale is not None and self.scale.reward_deadline_s >= self.grpo.verifier_timeout_s:
            raise ValueError(
                f"scale.reward_deadline_s ({self.scale.reward_deadline_s:g}) must be below "
                f"grpo.verifier_timeout_s ({self.grpo.verifier_timeout_s:g}): a hung reward actor is "
                "replaced at its deadline, and its completions need time to be scored again"
            )
        return self
