"""The distillation recipe: teacher + data -> student (a layer subset of the teacher, or a
given model) -> Trainer with `DistillObjective` -> recorded run.

The data are conversations rendered exactly as SFT renders them (`prepare_sft_data`): the
student learns on the assistant tokens, from the teacher's logits and from the tokens
themselves. The student is saved as a full HF model dir, ready as a speculative draft
(`rollout.drafters.ModelDrafter`) or for the eval suites like any checkpoint.
"""

from __future__ import annotations

from typing import Any

from tempering.config.distill import DistillConfig
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.recipes.sft import data_inputs, prepare_sft_data, sft_components, sft_files, tokens_per_s


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
        raise ValueError("student: give `layers` (a subset of the teacher's) or `model`")
    student = load_model(cfg.student.model)
    if student.config.vocab_size != teacher.config.vocab_size:
        raise ValueError(
            f"student {cfg.student.model!r} has vocabulary {student.config.vocab_size}, "
            f"the teacher {teacher.config.vocab_size}: distillation compares them token for token"
        )
    return student


def _components(cfg: DistillConfig, data: Any, tokenizer: Any, stage: Any) -> Components:
    from tempering.models.load import load_model
    from tempering.objectives.distill import DistillObjective
    from tempering.train.trainer import evaluate

    teacher = load_model(cfg.teacher)
    student = build_student(cfg, teacher)
    objective = DistillObjective(teacher, cfg.loss.temperature, cfg.loss.kl_weight)
    batches, evals, _ = sft_components(cfg, data, tokenizer.pad_token_id)  # SFT's batches, our loss
    check = held_out((lambda: evaluate(student, objective, evals, cfg.train.precision)) if evals else None)
    return Components(student, objective, batches, check, extra={"teacher": teacher})


def _summary(cfg: DistillConfig, data: Any, parts: Components, result: Any) -> dict[str, Any]:
    return {
        "student_params": sum(p.numel() for p in parts.model.parameters()),
        "teacher_params": sum(p.numel() for p in parts.extra["teacher"].parameters()),
        **tokens_per_s(cfg, data, parts, result),
    }


DISTILL = TrainingRecipe(
    "distill",
    base_model=lambda cfg: cfg.teacher,
    inputs=lambda cfg: data_inputs(cfg.data),
    train_files=lambda cfg: sft_files(cfg.data),
    prepare=lambda cfg, tokenizer: prepare_sft_data(cfg.data, tokenizer, cfg.train.seed),
    components=_components,
    summary=_summary,
    examples=lambda data: len(data.train),
)
"""Distillation: SFT's data and batches, the teacher's logits as the target."""


def run_distill(cfg: DistillConfig, force: bool = False) -> dict[str, Any]:
    """Run one distillation stage end to end and record it (`run_training`); returns the run summary."""
    return run_training(DISTILL, cfg, force)
