"""The one held-out monitor of every objective: evaluation during training (`train.eval_every`),
the best model (`train.keep_best`) and early stopping (`train.early_stopping`).

The measure is the recipe's: SFT, DPO, RM and distillation measure their `data.eval` with
`Components.evaluate` (numbers named `eval_<key>`, a bare loss `eval_loss`); GRPO and agent RL
their held-out suites with `Components.heldout` (`heldout/<suite>/<metric>`, e.g.
`heldout/tasks/accuracy`). Each measurement is one `eval` event of the run's event stream
(`tracking.context.RunContext`: metrics.jsonl and every tracker). A metric with `loss` in its
name is minimised, any other maximised.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from tempering.config import TrainSettings
from tempering.errors import UserError
from tempering.tracking.context import RunContext

Measure = Callable[[int, RunContext], dict[str, float]]
"""(step, run) -> the held-out numbers by name; the measure may write events of its own through `run`."""


def eval_metrics(value: Any) -> dict[str, float]:
    """A held-out measure as named numbers: a float is `eval_loss`, a dict's numbers `eval_<key>`."""
    if isinstance(value, (int, float)):
        return {"eval_loss": float(value)}
    if isinstance(value, dict):
        return {
            (k if k.startswith("eval_") else f"eval_{k}"): float(v)
            for k, v in value.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    return {}


def minimised(metric: str) -> bool:
    return "loss" in metric


class HeldoutMonitor:
    """Trainer callback: every `eval_every` steps, measure; keep the best model; stop when stuck.

    `save_best(step)` writes the model as the run's `best/`; `stop(reason)` asks the Trainer to stop.
    Step 0 (the model before training, GRPO's first measurement) is logged but neither kept nor
    counted for early stopping.
    """

    def __init__(
        self,
        settings: TrainSettings,
        measure: Measure,
        run: RunContext,
        save_best: Callable[[int], None],
        stop: Callable[[str], None],
    ):
        self.settings, self.measure, self.run = settings, measure, run
        self.save_best, self.stop = save_best, stop
        self.history: list[dict[str, float]] = []
        self.best: dict[str, float] | None = None  # {"step", "value"} of the best model saved
        self.stale = 0  # evaluations since the early-stopping metric last improved
        self.watched_best: float | None = None
        self.replayed: int | None = None  # evaluations read back from the event stream, once

    def _replay(self, step: int) -> int:
        """Take up the best value and the stale count from the `eval` events logged before `step`
        (written before a kill; the ones at or after `step` belong to steps done again)."""
        earlier = [r for r in self.run.events("eval") if 0 < r["step"] < step]
        for row in earlier:
            values = {k: v for k, v in row.items() if k not in ("event", "step", "time")}
            self.history.append({"step": row["step"], **values})
            metric = self.settings.keep_best
            if metric in values and (self.best is None or _better(metric, values[metric], self.best["value"], 0.0)):
                self.best = {"step": row["step"], "value": values[metric]}
            self._early_stop(row["step"], values, replay=True)
        return len(earlier)

    def __call__(self, step: int, record: dict) -> None:
        if self.settings.eval_every is None or step % self.settings.eval_every:
            return
        self.measure_at(step)

    @property
    def last_step(self) -> int | None:
        return int(self.history[-1]["step"]) if self.history else None

    def measure_at(self, step: int) -> dict[str, float]:
        """Measure now, log the `eval` event, and (after step 0) keep the best and watch for a plateau."""
        if self.replayed is None:  # a resumed run: the evaluations before this step count too
            self.replayed = self._replay(step)
        values = self.measure(step, self.run)
        for metric in (self.settings.keep_best, getattr(self.settings.early_stopping, "metric", None)):
            if metric is not None and metric not in values:
                raise UserError(
                    f"train metric {metric!r} is not measured here; the held-out measure gives: "
                    f"{', '.join(sorted(values)) or 'nothing (no held-out data)'}"
                )
        self.history.append({"step": step, **values})
        self.run.event("eval", show=False, step=step, **values)
        if step > 0:
            self._keep_best(step, values)
            self._early_stop(step, values)
        return values

    def _keep_best(self, step: int, values: dict[str, float]) -> None:
        metric = self.settings.keep_best
        if metric is None:
            return
        value = values[metric]
        if self.best is None or _better(metric, value, self.best["value"], 0.0):
            self.best = {"step": step, "value": value}
            self.save_best(step)

    def _early_stop(self, step: int, values: dict[str, float], replay: bool = False) -> None:
        rule = self.settings.early_stopping
        if rule is None or rule.metric not in values:
            return
        value = values[rule.metric]
        if self.watched_best is None or _better(rule.metric, value, self.watched_best, rule.min_delta):
            self.watched_best, self.stale = value, 0
            return
        self.stale += 1
        if self.stale >= rule.patience and not replay:
            self.stop(
                f"early stopping: {rule.metric} did not improve by more than {rule.min_delta} in "
                f"{rule.patience} evaluations (best {self.watched_best:.4g})"
            )


def _better(metric: str, value: float, best: float, min_delta: float) -> bool:
    if not math.isfinite(value):
        return False
    return value < best - min_delta if minimised(metric) else value > best + min_delta
