"""The distillation recipe: teacher + data -> student (a layer subset of the teacher, or a
given model) -> Trainer with `DistillObjective` -> recorded run.

With `on_policy: true` (`temper distill --on-policy`) the student learns from its own samples
instead: `OnPolicyDistillSource` samples prompts through the rollout path, the teacher scores the
sampled tokens, and the policy-gradient objective (`GRPOObjective`) trains on per-token
advantages = minus the reverse-KL estimate, in the same Trainer (docs/correctness.md); with
`rollout.divergence` the objective (`OnPolicyDivergenceObjective`) minimises that divergence
between the whole next-token distributions at each sampled position instead.

The data are conversations rendered exactly as SFT renders them (`prepare_sft_data`): the
student learns on the assistant tokens, from the teacher's logits and from the tokens
themselves. The student is saved as a full HF model dir, ready as a speculative draft
(`rollout.drafters.ModelDrafter`) or for the eval suites like any checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tempering.config.distill import DistillConfig
from tempering.errors import UserError
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.recipes.sft import data_inputs, prepare_sft_data, sft_components, sft_files, tokens_per_s
from tempering.runs.stage import input_list


def build_student(cfg: DistillConfig, teacher: Any) -> Any:
    """The student model: teacher layers copied into a smaller model, or a loaded one.

    Raises:
        ValueError: no student given, or one whose vocabulary differs from the teacher's.
    """
    from tempering.models.load import load_model
    from tempering.models.student import student_from_teacher

    if cfg.student.layers is not None:
        return student_from_teacher(teacher, cfg.student.layers)
    if cfg.student.model is None:
        raise UserError("student: give `layers` (a subset of the teacher's) or `model`")
    student = load_model(cfg.student.model, rope_scaling=cfg.rope_scaling)
    if student.config.vocab_size != teacher.config.vocab_size:
        raise UserError(
            f"student {cfg.student.model!r} has vocabulary {student.config.vocab_size}, "
            f"the teacher {teacher.config.vocab_size}: distillation compares them token for token"
        )
    return student


def _components(cfg: DistillConfig, data: Any, tokenizer: Any, stage: Any) -> Components:
    from tempering.batches import embedding_rows
    from tempering.data.padding import pad_id
    from tempering.models.load import load_model
    from tempering.objectives.distill import DistillObjective
    from tempering.train.trainer import evaluate

    teacher = load_model(cfg.teacher, rope_scaling=cfg.rope_scaling)
    student = build_student(cfg, teacher)
    objective = DistillObjective(teacher, cfg.loss.temperature, cfg.loss.kl_weight)
    assert cfg.data is not None  # DistillConfig requires it unless on_policy
    rows = embedding_rows(student)
    batches, evals, _ = sft_components(cfg.train, cfg.data, data, pad_id(tokenizer), rows)  # SFT's batches, our loss
    check = held_out((lambda: evaluate(student, objective, evals, cfg.train.precision)) if evals else None)
    return Components(student, objective, batches, check, summary=lambda result: _summary(student, teacher, result))


def _summary(student: Any, teacher: Any, result: Any) -> dict[str, Any]:
    return {
        "student_params": sum(p.numel() for p in student.parameters()),
        "teacher_params": sum(p.numel() for p in teacher.parameters()),
        **tokens_per_s(result),
    }


def _on_policy_summary(student: Any, result: Any) -> dict[str, Any]:
    return {
        "student_params": sum(p.numel() for p in student.parameters()),
        "reverse_kl_first": result.history[0].get("reverse_kl") if result.history else None,
        "reverse_kl_last": result.history[-1].get("reverse_kl") if result.history else None,
        "seconds": result.seconds,
    }


@dataclass
class Prompts:
    """On-policy distillation's prepared data: the prompts (tasks) the student answers."""

    tasks: list[Any]
    summary: dict[str, Any]
    errors: list[Any]


def _prompts(cfg: DistillConfig, tokenizer: Any) -> Prompts:
    from tempering.sources.tasks import load_tasks

    assert cfg.rollout is not None  # DistillConfig fills it under on_policy
    tasks = load_tasks(cfg.rollout.tasks)
    return Prompts(tasks, {"source": cfg.rollout.tasks.source, "prompts": len(tasks)}, [])


def _prompts_guard(cfg: DistillConfig) -> None:
    from tempering.evals.leakage import check_private_overlap_tasks
    from tempering.sources.tasks import load_tasks

    assert cfg.rollout is not None
    check_private_overlap_tasks(load_tasks(cfg.rollout.tasks), source=cfg.rollout.tasks.source)


def _on_policy_components(cfg: DistillConfig, data: Prompts, tokenizer: Any, stage: Any) -> Components:
    from tempering.config import GRPOPolicySettings
    from tempering.models.load import load_model
    from tempering.models.precision import default_device, resolve_precision
    from tempering.objectives.distill import OnPolicyDistillObjective, OnPolicyDivergenceObjective
    from tempering.recipes.grpo import mismatch_budget
    from tempering.rollout.distill_source import OnPolicyDistillSource
    from tempering.rollout.grpo_batches import PolicyLogprobs
    from tempering.rollout.select import build_engine

    r = cfg.rollout
    assert r is not None
    precision = resolve_precision(cfg.train.precision)
    teacher = load_model(cfg.teacher, rope_scaling=cfg.rope_scaling).to(default_device()).eval().requires_grad_(False)
    student = build_student(cfg, teacher)
    engine = build_engine(r.engine, student, tokenizer, precision)
    whole = r.divergence is not None  # the objective scores whole distributions: it asks the teacher
    source = OnPolicyDistillSource(
        data.tasks,
        engine,
        r,
        None if whole else PolicyLogprobs(teacher, precision, r.temperature),
        cfg.train.grad_accum,
        cfg.train.seed,
        model=student,
        tokenizer=tokenizer,
        teacher_engine=build_engine(r.engine, teacher, tokenizer, precision) if r.student_fraction < 1 else None,
    )
    if r.divergence is not None:
        temperature = r.divergence_temperature or r.temperature
        objective: Any = OnPolicyDivergenceObjective(
            teacher,
            r.divergence,
            r.divergence_keywords(),
            temperature,
            r.plugins,
            sampling_temperature=r.temperature,
            teacher_divergence=r.teacher_divergence,
            teacher_kl_weight=r.teacher_kl_weight,
        )
    else:  # mu = 1 and no reference: the ratio is 1 and the loss is -sum(A_t * log p_student(y_t))
        settings = GRPOPolicySettings(temperature=r.temperature, max_new_tokens=r.max_new_tokens)
        objective = OnPolicyDistillObjective(settings)
    callbacks = [mismatch_budget(r.mismatch_budget, "rollout")]
    return Components(
        student,
        objective,
        source,
        callbacks=callbacks,
        close=source.close,
        summary=lambda result: _on_policy_summary(student, result),
    )


DISTILL = TrainingRecipe(
    "distill",
    base_model=lambda cfg: cfg.teacher,
    inputs=lambda cfg: data_inputs(cfg.data),
    train_files=lambda cfg: sft_files(cfg.data),
    prepare=lambda cfg, tokenizer: prepare_sft_data(cfg.data, tokenizer, cfg.train.seed),
    components=_components,
    examples=lambda data: len(data.train),
)
"""Distillation: SFT's data and batches, the teacher's logits as the target."""

ON_POLICY_DISTILL = TrainingRecipe(
    "distill",
    base_model=lambda cfg: cfg.teacher,
    inputs=lambda cfg: input_list([(cfg.rollout.tasks.source, "prompts")]),
    prepare=_prompts,
    components=_on_policy_components,
    guard=_prompts_guard,
    periodic_eval=False,
)
"""On-policy distillation: the student's own samples, the teacher's log-probs as the reward."""


def run_distill(cfg: DistillConfig, force: bool = False) -> dict[str, Any]:
    """Run one distillation stage end to end and record it (`run_training`); returns the run summary."""
    return run_training(ON_POLICY_DISTILL if cfg.on_policy else DISTILL, cfg, force)
