"""`temper agent CONFIG.yaml`: the config of agent training (expert SFT, then trajectory-level GRPO).

No torch import here: a config error is reported before any model loads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tempering.agents.env import ENVIRONMENTS
from tempering.config import (
    DEFAULT_MODEL,
    EngineSettings,
    GRPOPolicySettings,
    GRPOSettings,
    HFEngineSettings,
    LoraSettings,
    Options,
    RopeScalingSetting,
    RunSettings,
    SamplingSettings,
    Strict,
    TrainSettings,
    WithOptions,
)


class EpisodeSettings(WithOptions):
    """How agent episodes are run (shared by `temper agent` training and agent suites). The
    environment's own settings (`tool`: `invalid_call_penalty`, `unsafe_action_penalty`) are
    written beside these and validated by its registered settings class (`agents.env`)."""

    environment: str = "tool"
    """The registered environment class each episode runs in (`agents.env.ENVIRONMENTS`; `tool`: `ToolEnv`)."""
    max_context_tokens: int = Field(default=1024, ge=16)
    """Token budget of a whole episode (prompt, turns, observations)."""
    min_turn_tokens: int = Field(default=8, ge=1)
    """Room a new turn needs; with less left the episode ends ("context")."""
    truncated_turns: Literal["mask", "penalize"] = "mask"
    """A turn cut by `max_new_tokens` ends the episode and is masked out of the loss ("mask")
    or kept with the episode's reward set to `-truncation_penalty` ("penalize")."""
    truncation_penalty: float = Field(default=0.5, ge=0)
    """The reward of an episode whose turn was cut, under `truncated_turns: penalize` (negated)."""
    env_workers: int = Field(default=4, ge=1)
    """Threads stepping environments (sandbox calls) in parallel."""

    @field_validator("environment")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in ENVIRONMENTS:
            raise ValueError(f"unknown environment {name!r} (registered: {', '.join(sorted(ENVIRONMENTS))})")
        return name

    @classmethod
    def options_class(cls, data: dict[str, Any]) -> tuple[type[Options], str]:
        name = data.get("environment", "tool")
        kind = ENVIRONMENTS.get(name) if isinstance(name, str) else None
        return (Options, f"environment {name!r}") if kind is None else (kind.settings, f"environment {name!r}")


class AgentTaskSettings(Strict):
    """Which agent tasks train and which evaluate."""

    suites: list[str] = ["tool_arith"]
    """Built-in suites (`tasks.BUILTIN`: `tool_arith`, `tool_notation`, `retry`, `workspace`, `safe`, `repo`), paths to task
    JSONL files, or Harbor task folders (`harbor`: the shipped ones, `harbor:<dir>`; docs/agents.md, Harbor tasks)."""
    tiers: list[int] | None = None
    """Train and evaluate only these tiers (None: all)."""
    eval_suites: list[str] | None = None
    """Suites whose held-out split is evaluated before and after (None: `suites`)."""
    eval_limit: int | None = Field(default=None, ge=1)
    """Evaluate at most this many held-out tasks per suite (None: all)."""


class AgentSFTSettings(TrainSettings):
    """Agent SFT on the scripted expert's trajectories of the training split (before RL)."""

    max_length: int = Field(default=1024, ge=16)
    """Longest expert conversation in tokens; longer ones are left out (and counted)."""
    tiers: list[int] | None = None
    """Expert data from these tiers only (held-back SFT: imitation on the easy tiers, RL on the
    rest); None: every training tier."""


AGENT_REFILLS = "max_refills"
"""The one single-turn rollout key agent RL implements too (refilling after tied groups are dropped)."""

SINGLE_TURN_ONLY = (
    frozenset(GRPOSettings.model_fields) - frozenset(GRPOPolicySettings.model_fields) - frozenset({AGENT_REFILLS})
)
"""GRPO keys of the single-turn rollout that agent RL does not implement (truncation policy,
chunked scoring, reward threads, verifier timeout, sampling ahead)."""


class StepCreditSettings(Strict):
    """Shaping rewards of one turn under `credit: step` (`agents/credit.py`) and their weight."""

    weight: float = Field(default=0.25, ge=0, lt=1)
    """Scale of the turns' (clipped) process advantage added to the outcome's; < 1 keeps the outcome dominant."""
    valid: float = Field(default=0.5, ge=0)
    """+ for a turn whose tool calls are all valid, - for a turn with a malformed/unknown/invalid call."""
    recovered: float = Field(default=1.0, ge=0)
    """+ for an error-free call right after a turn with an error (invalid call, failed run, wrong answer)."""
    progress: float = Field(default=1.0, ge=0)
    """+ for a test run of the agent's own with fewer failing tests than its previous one."""


class AgentRLSettings(GRPOPolicySettings):
    """Trajectory-level GRPO: group sampling and loss (`GRPOPolicySettings`, per turn for
    `max_new_tokens`), step-level credit, curriculum. The single-turn rollout's keys are
    rejected (truncated turns: `episode.truncated_turns`)."""

    @model_validator(mode="before")
    @classmethod
    def _no_single_turn_keys(cls, data: Any) -> Any:
        given = sorted(SINGLE_TURN_ONLY & set(data)) if isinstance(data, dict) else []
        if given:
            raise ValueError(
                f"{given[0]} is a single-turn GRPO setting that agent RL does not implement; remove it"
                + (f" (and {', '.join(given[1:])})" if given[1:] else "")
            )
        return data

    max_refills: int = Field(default=2, ge=0)
    """Extra rollout rounds per batch that refill groups dropped as tied (`dynamic_sampling`), with new tasks."""
    credit: Literal["trajectory", "step"] = "trajectory"
    """Advantages from the episode outcome only, or the outcome plus each turn's shaping reward (`step`)."""
    step: StepCreditSettings = StepCreditSettings()
    """The per-turn shaping rewards and their weight (used by `credit: step`)."""
    gamma: float = Field(default=1.0, gt=0, le=1)
    """Discount per later turn of step credit (1: none)."""
    tiers: list[int] | None = None
    """Curriculum: the tiers in training order (None: every tier of the training tasks, ascending);
    a training task of another tier is an error."""
    promote_at: float = Field(default=0.8, gt=0, le=1)
    """Curriculum: move to the next tier once the recent success rate on this one reaches it."""
    window: int = Field(default=32, ge=1)
    """Curriculum: episodes over which the success rate is measured."""
    review: float = Field(default=0.0, ge=0, lt=1)
    """Curriculum: the share of tasks drawn from the tiers already passed (0: the current tier only).
    Keeps groups with signal when the next tier is out of reach (there every group ties at 0)."""

    @model_validator(mode="after")
    def _step_keys_need_step_credit(self) -> AgentRLSettings:
        if "step" in self.model_fields_set and self.credit != "step":
            raise ValueError("step: the shaping rewards are read only with credit: step")
        if "gamma" in self.model_fields_set and self.credit != "step":
            raise ValueError("gamma discounts step credit: set credit: step or remove it")
        return self


class AgentEvalSettings(SamplingSettings):
    """The held-out evaluation before and after training (greedy by default)."""

    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature of the evaluation; 0 (greedy) makes it deterministic."""
    max_new_tokens: int = Field(default=48, ge=1)
    """Tokens per model turn."""


class AgentConfig(RopeScalingSetting, RunSettings):
    """`temper agent CONFIG.yaml`: agent SFT on expert trajectories, then trajectory-level GRPO."""

    model: str = DEFAULT_MODEL
    """Model spec: alias, HF dir, GGUF path or hub id."""
    lora: LoraSettings | None = LoraSettings()
    """LoRA settings; null trains all parameters."""
    tasks: AgentTaskSettings = AgentTaskSettings()
    """Training and evaluation suites."""
    episode: EpisodeSettings = EpisodeSettings()
    """Context budget, truncated turns, invalid-call penalty, environment threads."""
    sft: AgentSFTSettings | None = None
    """Expert SFT before RL (steps, batch, optimizer); null skips it."""
    rl: AgentRLSettings = AgentRLSettings()
    """Rollout sampling, group size, loss, step credit and curriculum."""
    train: TrainSettings
    """RL steps, micro-batches, precision, seed, optimizer, guard and checkpoints."""
    eval: AgentEvalSettings = AgentEvalSettings()
    """Held-out evaluation sampling."""
    engine: HFEngineSettings = EngineSettings(kind="hf")
    """The engine that samples episodes, over the model being trained (default: the
    static-batch HFEngine; hf, batching or speculative: vLLM would need weight syncs)."""

    @model_validator(mode="after")
    def _engine_shares_the_model(self) -> AgentConfig:
        if self.engine.kind == "vllm":
            raise ValueError(
                "engine.kind 'vllm' cannot sample agent episodes: the agent loop samples from the "
                "model it trains and never syncs weights to another engine (use hf, batching or speculative)"
            )
        return self

    @model_validator(mode="after")
    def _accumulation_fits(self) -> AgentConfig:
        if self.train.grad_accum > self.rl.prompts_per_step:
            raise ValueError("train.grad_accum must not exceed rl.prompts_per_step (micro-batches hold whole groups)")
        return self
