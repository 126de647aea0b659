"""The one training sequence every objective runs: leakage guard, stage, prepare, components, fit,
evaluate, summary.

A `TrainingRecipe` is a row of functions (compose, don't inherit); `run_training` calls them in
this order, so every objective gets the same guards and the same run bookkeeping:

1. `train_files(cfg)`: the training files, refused before anything is recorded when they hold a
   private eval suite's tasks (`evals.leakage.check_private_overlap`);
2. `stage(cfg, force)`: the `StageSpec` (inputs with their roles); a finished run returns its
   recorded summary, a killed one resumes (`runs.stage.run_stage`);
3. `prepare(cfg, tokenizer)`: the data (the tokenizer is the base model's), quarantined rows
   written to the run;
4. `components(cfg, prepared, tokenizer)`: model, objective, batch source and the held-out check;
5. `fit`: the one `Trainer`, around the evaluation before and after;
6. `summary(cfg, prepared, parts, result)`: the recipe's keys next to the shared ones (steps,
   resume point, guard counts, first / last loss); `report(summary)` prints on rank 0 only.

The registry (`recipes.registry`) turns each recipe into a `temper` command and a pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tempering.runs.stage import StageSpec, run_stage


@dataclass
class Components:
    """What a recipe hands the Trainer: the model, its objective, the batches, the held-out check."""

    model: Any
    objective: Any
    batches: Any
    evaluate: Callable[[], Any] = lambda: None
    """The held-out measure, run before and after fit (None: no held-out data)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Recipe-specific pieces the summary reads (e.g. a reference model's info)."""


@dataclass(frozen=True)
class TrainingRecipe:
    """One objective's steps of the training sequence (see the module docstring)."""

    kind: str
    """The stage kind recorded in the registry (`sft`, `rm`, ...)."""
    base_model: Callable[[Any], str]
    """The model the stage starts from (recorded as its base model)."""
    inputs: Callable[[Any], list]
    """The stage's recorded inputs with their roles (`runs.stage.input_list`)."""
    train_files: Callable[[Any], list[str]]
    """The files trained on: checked against the private eval suites before any work."""
    prepare: Callable[[Any, Any], Any]
    """(cfg, tokenizer) -> prepared data with `.summary` and `.errors` (quarantined rows)."""
    components: Callable[[Any, Any, Any], Components]
    """(cfg, prepared, tokenizer) -> the Trainer's components."""
    summary: Callable[[Any, Any, Components, Any], dict[str, Any]] = lambda cfg, data, parts, result: {}
    """(cfg, prepared, components, fit result) -> the recipe's own summary keys."""
    after_save: Callable[[Any, Any], dict[str, Any]] | None = None
    """(cfg, run dir) -> summary keys measured on the saved model (the RM's best-of-n check)."""
    report: Callable[[dict[str, Any]], None] | None = None
    """Prints the finished summary (rank 0 only)."""
    before_key: str = "eval_loss_before"
    after_key: str = "eval_loss_after"
    quarantine_kind: str = "rows"

    def stage(self, cfg: Any, force: bool = False) -> StageSpec:
        """The stage a config describes: its inputs with their roles."""
        t = cfg.train
        return StageSpec(
            self.kind,
            cfg.out,
            cfg.name,
            cfg.model_dump(),
            self.inputs(cfg),
            self.base_model(cfg),
            t.steps,
            t.seed,
            t.threads,
            force,
        )


def check_leakage(recipe: TrainingRecipe, cfg: Any) -> None:
    """Refuse training files holding a private eval suite's tasks (before anything is recorded)."""
    from tempering.evals.leakage import check_private_overlap

    check_private_overlap(recipe.train_files(cfg))


def run_training(recipe: TrainingRecipe, cfg: Any, force: bool = False) -> dict[str, Any]:
    """Run one training stage through the sequence and record it; returns the run summary.

    `force`: resume even though the config differs from the one the run started with.
    """
    from tempering.data.io import quarantine_in_run
    from tempering.models.load import load_tokenizer
    from tempering.train.distributed import world
    from tempering.train.metrics import console
    from tempering.train.trainer import Trainer

    check_leakage(recipe, cfg)
    with run_stage(recipe.stage(cfg, force)) as stage:
        if stage.finished:
            return stage.result.summary
        tokenizer = load_tokenizer(recipe.base_model(cfg))
        data = recipe.prepare(cfg, tokenizer)
        if stage.writes:
            quarantine_in_run(data.errors, stage.run_dir, console, recipe.quarantine_kind)
        parts = recipe.components(cfg, data, tokenizer)
        before = parts.evaluate()
        result = Trainer(parts.model, parts.objective, parts.batches, cfg.train, stage.run_dir).fit()
        after = parts.evaluate()
        stage.save_model(parts.model, tokenizer)
        summary = {
            "data": data.summary,
            "steps": result.steps,
            "resumed_from": result.resumed_from,
            "guard": result.counts,
            "train_loss_first": result.losses[0] if result.losses else None,
            "train_loss_last": result.losses[-1] if result.losses else None,
            recipe.before_key: before,
            recipe.after_key: after,
            **recipe.summary(cfg, data, parts, result),
        }
        if recipe.after_save is not None:
            summary.update(recipe.after_save(cfg, stage.run_dir))
        stage.finish(summary, {})
        if recipe.report is not None and world().main:
            recipe.report(summary)
    return stage.result.summary
