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
from tempering.data.io import quarantine_in_run
from tempering.recipes.sft import data_inputs, prepare_sft_data, sft_components
from tempering.runs.stage import StageSpec, run_stage
from tempering.train.metrics import console


def distill_stage(cfg: DistillConfig, force: bool = False) -> StageSpec:
    """The stage a distill config describes: its inputs with their roles."""
    return StageSpec(
        "distill",
        cfg.out,
        cfg.name,
        cfg.model_dump(),
        data_inputs(cfg.data),
        cfg.teacher,
        cfg.train.steps,
        cfg.train.seed,
        cfg.train.threads,
        force,
    )


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


def run_distill(cfg: DistillConfig, force: bool = False) -> dict[str, Any]:
    """Run one distillation stage end to end and record it; returns the run summary."""
    from tempering.evals.leakage import check_private_overlap
    from tempering.models.load import load_model, load_tokenizer
    from tempering.objectives.distill import DistillObjective
    from tempering.train.trainer import Trainer, evaluate

    check_private_overlap(cfg.data.train + (cfg.data.replay.data if cfg.data.replay else []))
    with run_stage(distill_stage(cfg, force)) as stage:
        if stage.finished:
            return stage.result.summary
        tokenizer = load_tokenizer(cfg.teacher)
        data = prepare_sft_data(cfg.data, tokenizer, cfg.train.seed)
        quarantine_in_run(data.errors, stage.run_dir, console)
        teacher = load_model(cfg.teacher)
        student = build_student(cfg, teacher)
        objective = DistillObjective(teacher, cfg.loss.temperature, cfg.loss.kl_weight)
        batches, evals, _ = sft_components(cfg, data, tokenizer.pad_token_id)  # SFT's batches, our loss
        before = evaluate(student, objective, evals, cfg.train.precision) if evals else None
        result = Trainer(student, objective, batches, cfg.train, stage.run_dir).fit()
        after = evaluate(student, objective, evals, cfg.train.precision) if evals else None
        stage.save_model(student, tokenizer)
        stage.finish(
            {
                "data": data.summary,
                "steps": result.steps,
                "resumed_from": result.resumed_from,
                "guard": result.counts,
                "student_params": sum(p.numel() for p in student.parameters()),
                "teacher_params": sum(p.numel() for p in teacher.parameters()),
                "train_loss_first": result.losses[0] if result.losses else None,
                "train_loss_last": result.losses[-1] if result.losses else None,
                "eval_loss_before": before,
                "eval_loss_after": after,
                "real_tokens_per_s": result.real_tokens / result.seconds if result.seconds else None,
            },
            {},
        )
    return stage.result.summary
