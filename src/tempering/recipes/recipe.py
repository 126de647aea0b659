"""The one training sequence every objective runs: leakage guard, stage, prepare, components, fit,
evaluate, summary.

A `TrainingRecipe` is a row of functions (compose, don't inherit); `run_training` calls them in
this order, so every objective gets the same guards and the same run bookkeeping:

1. `guard(cfg)`: refused before anything is recorded; by default the training files
   (`train_files(cfg)`) must hold no private eval suite's tasks (`evals.leakage`);
2. `stage(cfg, force)`: the `StageSpec` (inputs with their roles); a finished run returns its
   recorded summary, a killed one resumes (`runs.stage.run_stage`), all inside `session(cfg)`
   (e.g. a Ray session);
3. `prepare(cfg, tokenizer)`: the data (the tokenizer is the base model's), quarantined rows
   written to the run;
4. `components(cfg, prepared, tokenizer, stage)`: model, objective, batch source, callbacks and
   the held-out check; their `close` runs however the stage ends;
5. `fit`: the one `Trainer`, writing through the stage's `RunContext` (metrics.jsonl and every
   tracker, `tracking.context`), with `evaluate(None)` before and `evaluate(result)` after, and
   the one held-out monitor (`recipes.monitor`: `train.eval_every`, `keep_best`, `early_stopping`
   for every objective) as a callback;
6. `parts.summary(result)`: the recipe's keys next to the shared ones (steps, resume point, guard
   counts, first / last loss), from what its components hold; `report(summary)` prints on rank 0 only.

The registry (`recipes.registry`) turns each recipe into a `temper` command and a pipeline stage.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from tempering.errors import UserError
from tempering.runs.stage import StageSpec, input_list, run_stage


@dataclass
class Components:
    """What a recipe hands the Trainer: the model, its objective, the batches, the held-out check."""

    model: Any
    objective: Any
    batches: Any
    evaluate: Callable[[Any], Any] = lambda result: None
    """The held-out measure: called with None before fit and with the fit result after (None: no held-out data)."""
    callbacks: list[Any] = field(default_factory=list)
    """Trainer callbacks (e.g. a held-out monitor, a mismatch bound)."""
    close: Callable[[], None] = lambda: None
    """Releases what the components hold (engines, rollout workers), however the stage ends."""
    outputs: dict[str, str] = field(default_factory=dict)
    """Recorded outputs besides the final model (e.g. the trajectory store)."""
    summary: Callable[[Any], dict[str, Any]] = lambda result: {}
    """(fit result) -> the recipe's own summary keys: a closure over the typed state its components
    built (e.g. the reference model's info, the held-out monitor), so nothing is read back by name."""
    heldout: Callable[[int, Any], dict[str, float]] | None = None
    """(step, run context) -> named held-out numbers (`heldout/<suite>/<metric>`): what
    `train.eval_every`, `keep_best` and `early_stopping` watch (GRPO, agent RL). None: `evaluate`'s
    numbers as `eval_<key>` (`recipes.monitor.eval_metrics`)."""
    heldout_ends: bool = False
    """Whether `heldout` also measures a fresh run's start (step 0) and the last step (GRPO)."""


def held_out(check: Callable[[], Any] | None) -> Callable[[Any], Any]:
    """`Components.evaluate` of a recipe measuring the same way before and after fit."""
    return (lambda result: check()) if check is not None else (lambda result: None)


@dataclass(frozen=True)
class TrainingRecipe:
    """One objective's steps of the training sequence (see the module docstring)."""

    kind: str
    """The stage kind recorded in the registry (`sft`, `rm`, ...)."""
    base_model: Callable[[Any], str]
    """The model the stage starts from (recorded as its base model; its tokenizer renders the data)."""
    inputs: Callable[[Any], list]
    """The stage's recorded inputs with their roles (`runs.stage.input_list`)."""
    prepare: Callable[[Any, Any], Any]
    """(cfg, tokenizer) -> prepared data with `.summary` and `.errors` (quarantined rows)."""
    components: Callable[[Any, Any, Any, Any], Components]
    """(cfg, prepared, tokenizer, stage) -> the Trainer's components."""
    train_files: Callable[[Any], list[str]] = lambda cfg: []
    """The files trained on: checked against the private eval suites by the default guard."""
    guard: Callable[[Any], None] | None = None
    """Replaces the file check where the training data are not files (GRPO's tasks)."""
    session: Callable[[Any], ContextManager[Any]] = lambda cfg: nullcontext()
    """Context the stage runs in (a Ray session when the config scales out)."""
    after_save: Callable[[Any, Any], dict[str, Any]] | None = None
    """(cfg, run dir) -> summary keys measured on the saved model (the RM's best-of-n check)."""
    report: Callable[[dict[str, Any]], None] | None = None
    """Prints the finished summary (rank 0 only)."""
    examples: Callable[[Any], int] | None = None
    """(prepared) -> training examples per epoch, which `train.epochs` needs (None: epochs are refused)."""
    context_parallel: bool = False
    """Whether `train.context_parallel` > 1 may split this recipe's sequences over processes (SFT)."""
    periodic_eval: bool = True
    """Whether the recipe has a held-out measure for `train.eval_every` (on-policy distillation has none)."""
    tokenizer: Callable[[str], Any] | None = None
    """(base model spec) -> what renders the data and is saved with the model (None: its tokenizer;
    a vision recipe: its processor)."""
    before_key: str = "eval_loss_before"
    after_key: str = "eval_loss_after"
    quarantine_kind: str = "rows"

    def stage(self, cfg: Any, force: bool = False) -> StageSpec:
        """The stage a config describes: its inputs with their roles."""
        t = cfg.train
        template = getattr(cfg, "chat_template", None)  # a template file is an input like the data
        inputs = self.inputs(cfg) + (input_list([(template, "chat_template")]) if template else [])
        return StageSpec(
            self.kind, cfg.out, cfg.name, cfg.model_dump(), inputs, self.base_model(cfg), t.steps or 0, t.seed,
            t.threads, force,
        )  # fmt: skip


def check_train_settings(recipe: TrainingRecipe, cfg: Any) -> None:
    """Refuse `train` keys this recipe would ignore (one line each), before anything is recorded."""
    t = cfg.train
    if t.epochs is not None and recipe.examples is None:
        raise UserError(f"{recipe.kind}: train.epochs is not supported here (no fixed example count); set train.steps")
    if t.context_parallel > 1 and not recipe.context_parallel:
        raise UserError(
            f"{recipe.kind}: train.context_parallel is supported for sft only (this objective's "
            "batches are not split along the sequence); set train.context_parallel: 1"
        )
    if t.eval_every is not None and not recipe.periodic_eval:
        raise UserError(
            f"{recipe.kind}: train.eval_every (and keep_best / early_stopping) is not supported here: "
            "this recipe has no held-out measure"
        )


def check_leakage(recipe: TrainingRecipe, cfg: Any) -> None:
    """Refuse training data holding a private eval suite's tasks (before anything is recorded)."""
    from tempering.evals.leakage import check_private_overlap

    if recipe.guard is not None:
        recipe.guard(cfg)
    else:
        check_private_overlap(recipe.train_files(cfg))


def run_training(recipe: TrainingRecipe, cfg: Any, force: bool = False) -> dict[str, Any]:
    """Run one training stage through the sequence and record it; returns the run summary.

    `force`: resume even though the config differs from the one the run started with.
    """
    from tempering.config.grpo import load_algorithms
    from tempering.models.load import load_tokenizer
    from tempering.tracking.trackers import require_trackers

    check_train_settings(recipe, cfg)
    load_algorithms(cfg)  # the config's plug-ins run now, never while it validated
    check_leakage(recipe, cfg)
    require_trackers(cfg.train.loggers)  # a tracker that cannot run stops the stage before it is recorded
    with recipe.session(cfg), run_stage(recipe.stage(cfg, force)) as stage:
        if stage.finished:
            return stage.summary
        tokenizer = (recipe.tokenizer or load_tokenizer)(recipe.base_model(cfg))
        if getattr(cfg, "chat_template", None):
            from tempering.models.chat_template import apply_chat_template

            apply_chat_template(tokenizer, cfg.chat_template)
        data = recipe.prepare(cfg, tokenizer)
        _quarantine(recipe, stage, data)
        cfg = with_epoch_steps(recipe, cfg, data)
        parts = recipe.components(cfg, data, tokenizer, stage)
        try:
            summary = _fit(recipe, cfg, stage, data, parts, tokenizer)
        finally:
            parts.close()
        stage.finish(summary, parts.outputs)
        _report(recipe, summary)
    return stage.summary


def _quarantine(recipe: TrainingRecipe, stage: Any, data: Any) -> None:
    from tempering.data.io import quarantine_in_run
    from tempering.train.metrics import console

    if stage.writes:
        quarantine_in_run(data.errors, stage.run_dir, console, recipe.quarantine_kind)


def with_epoch_steps(recipe: TrainingRecipe, cfg: Any, data: Any) -> Any:
    """`cfg` with `train.steps` derived from `train.epochs` (and logged); unchanged when steps are set."""
    from tempering.train.metrics import console

    t = cfg.train
    if t.epochs is None or recipe.examples is None:
        return cfg
    examples = recipe.examples(data)
    per_step = t.batch_size * t.grad_accum  # the global micro-batch: its ranks share it (or its rows)
    steps = max(1, math.ceil(t.epochs * examples / per_step))
    console.print(
        f"[dim]train.epochs {t.epochs:g} over {examples} examples at {per_step} per step: {steps} steps[/dim]"
    )
    return cfg.model_copy(update={"train": t.model_copy(update={"steps": steps})})


def _fit(recipe: TrainingRecipe, cfg: Any, stage: Any, data: Any, parts: Components, tokenizer: Any) -> dict:
    from tempering.tracking.context import RunContext
    from tempering.tracking.events import metrics_path
    from tempering.train.distributed import world
    from tempering.train.loss_plot import plot_loss, plot_moe_load
    from tempering.train.trainer import Trainer

    config, lineage = cfg.model_dump(mode="json"), stage.lineage()
    with RunContext.open(stage.run_dir, world().rank, cfg.train.loggers, config, lineage) as run:
        trainer = Trainer(
            parts.model, parts.objective, parts.batches, cfg.train, stage.run_dir, parts.callbacks, run=run
        )
        fresh = not (stage.run_dir / "checkpoints").exists()
        monitor = _monitor(recipe, cfg, stage, parts, tokenizer, trainer)
        if monitor is not None and parts.heldout_ends and fresh:
            monitor.measure_at(0)
        before = parts.evaluate(None)
        if monitor is not None and parts.heldout is None and before is None:
            raise UserError(f"{recipe.kind}: train.eval_every needs held-out data (data.eval)")
        result = trainer.fit()
        if monitor is not None and parts.heldout_ends and monitor.last_step != result.steps:
            monitor.measure_at(result.steps)
        after = parts.evaluate(result)
        stage.save_model(parts.model, tokenizer, state_dict=trainer.final_state_dict())
    plot = plot_loss(metrics_path(stage.run_dir)) if stage.writes else None
    moe_plot = plot_moe_load(metrics_path(stage.run_dir)) if stage.writes else None
    summary = {
        "data": data.summary,
        "steps": result.steps,
        "target_steps": cfg.train.steps,
        "stopped_early": result.stopped_early,
        "best": monitor.best if monitor is not None else None,
        "loss_plot": str(plot) if plot else None,
        **({"moe_load_plot": str(moe_plot)} if moe_plot else {}),
        "resumed_from": result.resumed_from,
        "guard": result.counts,
        "train_loss_first": result.loss_first,  # of the first attempt, kept across resumes
        "train_loss_last": result.losses[-1] if result.losses else None,
        recipe.before_key: before,
        recipe.after_key: after,
        **parts.summary(result),
    }
    if recipe.after_save is not None:
        summary.update(recipe.after_save(cfg, stage.run_dir))
    return summary


def _monitor(recipe: TrainingRecipe, cfg: Any, stage: Any, parts: Components, tokenizer: Any, trainer: Any) -> Any:
    """The one held-out monitor (`recipes.monitor`), registered as a Trainer callback, or None when
    nothing is measured (no `train.eval_every` and no step measure of the recipe's own)."""
    from tempering.recipes.monitor import HeldoutMonitor, eval_metrics

    measure = parts.heldout
    if measure is None:
        if cfg.train.eval_every is None:
            return None
        evaluate = parts.evaluate
        measure = lambda step, run: eval_metrics(evaluate(None))  # noqa: E731
    elif cfg.train.eval_every is None and not parts.heldout_ends:
        return None
    monitor = HeldoutMonitor(
        cfg.train,
        measure,
        trainer.run,
        lambda step: stage.save_model(parts.model, tokenizer, "best"),
        trainer.request_stop,
    )
    trainer.callbacks.append(monitor)
    return monitor


def _report(recipe: TrainingRecipe, summary: dict[str, Any]) -> None:
    from tempering.train.distributed import world

    if recipe.report is not None and world().main:
        recipe.report(summary)
