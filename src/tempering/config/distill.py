"""Typed configuration of `temper distill` (no torch import, like `tempering.config`)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tempering import algorithms
from tempering.config.base import DEFAULT_MODEL, RunSettings, Strict
from tempering.config.grpo import TaskSourceSettings, UsesAlgorithms, registered
from tempering.config.longctx import RopeScalingSetting
from tempering.config.sampling import EngineSettings, SamplingSettings
from tempering.config.train import DataSettings, TrainSettings
from tempering.errors import UserError


class StudentSettings(Strict):
    """Which student learns: a smaller copy of the teacher, or an existing model."""

    layers: list[int] | None = None
    """Teacher decoder layers copied, in order, into a smaller student (embeddings, final norm
    and LM head are copied too), e.g. [0, 29]; None: start from `model`."""
    model: str | None = None
    """An existing student (alias, HF dir, .gguf) with the teacher's vocabulary; used when
    `layers` is None."""

    @field_validator("layers")
    @classmethod
    def _layers_nonempty(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or min(v) < 0 or len(set(v)) != len(v)):
            raise ValueError(f"layers must be distinct non-negative teacher layer indices, got {v}")
        return v


class DistillLoss(Strict):
    """The distillation loss: forward KL to the teacher plus cross-entropy on the data."""

    temperature: float = Field(default=1.0, gt=0)
    """Softmax temperature of both teacher and student in the KL term (scaled by T^2, Hinton et al.)."""
    kl_weight: float = Field(default=1.0, ge=0, le=1)
    """Weight of the KL term; 1 - kl_weight goes to next-token cross-entropy on the data's
    assistant tokens (sequence-level distillation when the data are the teacher's generations)."""


class OnPolicySettings(UsesAlgorithms, SamplingSettings):
    """On-policy distillation (`on_policy: true`): the student samples replies to these prompts
    through the rollout path, the teacher scores the sampled tokens, and each token's advantage is
    minus its reverse-KL estimate log p_student - log p_teacher (docs/correctness.md)."""

    algorithm_fields = {"divergence": "divergence", "teacher_divergence": "divergence"}

    tasks: TaskSourceSettings = TaskSourceSettings()
    """Where the prompts come from (a task source; its verifier only feeds the logged accuracy)."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of the student (1: the reverse KL is estimated on the student's own
    distribution); also the temperature both log-probs are taken at."""
    prompts_per_step: int = Field(default=8, ge=1)
    """Distinct prompts per step."""
    samples_per_prompt: int = Field(default=4, ge=1)
    """Replies sampled per prompt."""
    engine: EngineSettings = EngineSettings()
    """The engine the student samples with."""
    mismatch_budget: dict[str, float] | None = None
    """As `grpo.mismatch_budget`: stop when the student's sampler and trainer disagree beyond it."""
    plugins: list[str] = []
    """Modules to import before `divergence` is looked up (each registers its own on import)."""
    divergence: str | None = None
    """None: the policy-gradient path, each sampled token's advantage minus its one-sample reverse-KL
    estimate (needs only the teacher's log-probs of the sampled tokens). A registered divergence
    (`objectives/divergences.py`: reverse_kl, forward_kl, jsd, or a plug-in's): minimised over the
    whole next-token distribution at every sampled position (the teacher's full logits, in this
    process; docs/correctness.md)."""
    beta: float | None = Field(default=None, ge=0, le=1)
    """The `jsd` divergence's interpolation (0: forward KL, 1: reverse KL; default 0.5): the same as
    `divergence_settings: {beta: ...}`, kept as the short spelling."""
    divergence_settings: dict[str, float] = {}
    """Settings of the divergence (and `teacher_divergence`): its keyword-only parameters (jsd: beta;
    a plug-in's its own), each passed to the divergences that take it; a key neither takes is an error."""
    student_fraction: float = Field(default=1.0, gt=0, le=1)
    """The share of steps that learn on the student's own samples (GKD's lambda); the other steps,
    spread evenly, learn on the teacher's greedy replies to as many prompts (`divergence` only)."""
    teacher_divergence: str | None = None
    """The registered divergence on the steps of the teacher's greedy replies (`student_fraction`
    < 1; default: `divergence`), e.g. forward_kl there with reverse_kl on the student's samples:
    mode-seeking where the student samples, mass-covering on the teacher's path, whose end token
    reverse KL alone lets the student drop (docs/correctness.md)."""
    teacher_kl_weight: float = Field(default=1.0, ge=0, le=1)
    """On the steps of the teacher's greedy replies: the weight of `teacher_divergence`; 1 - it goes
    to cross-entropy on the reply's tokens (`loss.kl_weight` of `temper distill`: with forward_kl
    and 0.8 those steps take the forward recipe's own loss, whose cross-entropy on the teacher's
    greedy tokens is what a speculative draft is checked on)."""
    divergence_temperature: float | None = Field(default=None, gt=0)
    """The temperature of both distributions a divergence compares (default: `temperature`); set it
    to sample the prefixes cooler than the distributions are compared, e.g. sampling at 0.5 and
    comparing at 1 (the prefixes nearer the greedy path a speculative draft is checked on)."""

    @field_validator("divergence", "teacher_divergence")
    @classmethod
    def _divergence_is_registered(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else registered("divergence", value, info)

    @model_validator(mode="after")
    def _settings_of_the_divergence_need_it(self) -> OnPolicySettings:
        self._settings_fit_the_divergences()
        if self.teacher_divergence is not None and (self.divergence is None or self.student_fraction == 1):
            raise ValueError(
                "teacher_divergence needs a divergence and student_fraction < 1 (it applies on the teacher's replies)"
            )
        if self.teacher_kl_weight < 1 and (self.divergence is None or self.student_fraction == 1):
            raise ValueError(
                "teacher_kl_weight < 1 needs a divergence and student_fraction < 1 (it applies on the teacher's replies)"
            )
        if self.student_fraction < 1 and self.divergence is None:
            raise ValueError(
                "student_fraction < 1 needs a divergence (the policy gradient learns on the student's samples only)"
            )
        if self.divergence_temperature is not None and self.divergence is None:
            raise ValueError(
                "divergence_temperature applies with a divergence only (the policy gradient samples and scores at `temperature`)"
            )
        return self

    @field_validator("mismatch_budget", mode="before")
    @classmethod
    def _budget_names_its_metrics(cls, value: object) -> object:
        from tempering.config.grpo import check_mismatch_budget

        return check_mismatch_budget(value)

    def divergence_keywords(self) -> dict[str, float]:
        """`divergence_settings` with `beta` (the divergences receive each key they take)."""
        return {**self.divergence_settings, **({} if self.beta is None else {"beta": self.beta})}

    def _settings_fit_the_divergences(self) -> None:
        """A setting no named divergence takes would do nothing. A built-in's settings are read from
        its source (`algorithms.builtin_names`); a plug-in's when it loads (`load_algorithms`)."""
        table = algorithms.builtin_names()
        named = [n for n in (self.divergence, self.teacher_divergence) if n is not None]
        if all(("divergence", n) in table for n in named):
            self._refuse_idle_settings({n: table[("divergence", n)] for n in named})

    def _refuse_idle_settings(self, takes: dict[str, tuple[str, ...]]) -> None:
        idle = sorted(set(self.divergence_keywords()) - {k for ks in takes.values() for k in ks})
        if idle:
            named = (
                ", ".join(f"{n} takes {', '.join(ks) or 'none'}" for n, ks in takes.items()) or "no divergence named"
            )
            raise UserError(f"{idle[0]}: a setting no named divergence takes ({named})")

    def load_algorithms(self) -> None:
        super().load_algorithms()
        named = [n for n in (self.divergence, self.teacher_divergence) if n is not None]
        self._refuse_idle_settings(
            {n: algorithms.keyword_settings(algorithms.lookup("divergence", n).fn) for n in named}
        )


class DistillConfig(RopeScalingSetting, RunSettings):
    """`temper distill CONFIG.yaml`: train a student on a teacher's logits and generations, or
    on-policy (`--on-policy`): on its own samples, scored by the teacher."""

    teacher: str = DEFAULT_MODEL
    """Teacher model spec: alias, HF dir, GGUF path or hub id."""
    student: StudentSettings
    """The student: a subset of the teacher's layers, or an existing model."""
    on_policy: bool = False
    """false: forward KL on `data` (the teacher's logits on given conversations); true: on-policy
    reverse KL on the student's own samples (`rollout`)."""
    data: DataSettings | None = None
    """Conversations to distil on (e.g. the teacher's verified generations from `temper data synth`);
    required unless `on_policy`."""
    loss: DistillLoss = DistillLoss()
    """KL temperature and the KL / cross-entropy mix (forward KL only)."""
    rollout: OnPolicySettings | None = None
    """On-policy sampling: prompts, samples, engine (`on_policy` only; default settings when omitted)."""
    train: TrainSettings
    """Steps, batch, precision, seed, optimizer, guard and checkpoints (all student parameters train)."""

    @model_validator(mode="after")
    def _keys_of_the_other_kind_are_errors(self) -> DistillConfig:
        if self.on_policy:
            idle = [k for k in ("data", "loss") if k in self.model_fields_set and getattr(self, k) is not None]
            if idle:
                raise ValueError(
                    f"{', '.join(idle)} do nothing under on_policy: true (the prompts are `rollout.tasks`)"
                )
            if self.rollout is None:
                self.rollout = OnPolicySettings()
        else:
            if self.rollout is not None:
                raise ValueError("rollout applies to on_policy: true only (set on_policy, or drop rollout)")
            if self.data is None:
                raise ValueError("data is required (conversations to distil on), unless on_policy: true")
        return self
