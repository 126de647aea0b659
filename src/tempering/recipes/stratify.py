"""`temper data stratify`: measure each task's pass rate, bucket by difficulty, write an RL set.

    k samples per task through the one rollout path (engine + verifiers)
      -> pass rate = passed / judged samples (a verifier error or timeout is no failure)
      -> difficulty = 1 - pass rate, written into each task's `difficulty`
      -> buckets: too_easy (pass rate >= too_easy), too_hard (<= too_hard), learnable (between)
      -> rl_set.jsonl: the learnable tasks, easy to hard (curriculum), shuffled, or as given

Mastered tasks (every sample right) and tasks out of reach (none right) give GRPO groups
with equal rewards, hence zero advantage: dropping them spends the compute at the
capability boundary.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Sequence

from rich.console import Console

from tempering.atomic import write_jsonl_atomic
from tempering.config import SamplingSettings, StratifyConfig, TaskSourceSettings
from tempering.errors import UserError
from tempering.rollout.rollout import unjudged_reasons
from tempering.runs.stage import StageSpec, input_list, run_stage
from tempering.types import Task, Trajectory

BUCKETS = ("too_easy", "learnable", "too_hard", "unjudged")


def sample_tasks(
    tasks: Sequence[Task],
    engine: Any,
    sampling: SamplingSettings,
    k: int,
    *,
    seed: int,
    batch_prompts: int,
    reward_workers: int,
    label: str,
    console: Console | None = None,
) -> list[list[Trajectory]]:
    """`k` scored samples per task through the one rollout path, a batch of prompts at a time,
    with a progress line per batch (stderr)."""
    from tempering.rollout.rollout import ThreadRewardWorkers, start_rollout

    console = console or Console(stderr=True)
    tasks = list(tasks)
    out: list[list[Trajectory]] = []
    t0 = time.perf_counter()
    with ThreadRewardWorkers(reward_workers) as workers:
        for b, start in enumerate(range(0, len(tasks), batch_prompts)):
            chunk = tasks[start : start + batch_prompts]
            out += start_rollout(chunk, engine, sampling, workers, n=k, seed=seed * 100_003 + b).collect()
            done, elapsed = len(out), time.perf_counter() - t0
            rate = done * k / elapsed
            eta = (len(tasks) - done) * k / rate if rate else 0.0
            console.print(
                f"{label}: {done}/{len(tasks)} tasks, {done * k} samples, {rate:.1f} samples/s, eta {eta:.0f}s",
                highlight=False,
                soft_wrap=True,
            )
    return out


@dataclass
class TaskRate:
    task: Task
    passed: int
    judged: int
    samples: int

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.judged if self.judged else None


def pass_rates(tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]]) -> list[TaskRate]:
    """Passed and judged samples per task (verifier errors and timeouts are not judged)."""
    return [
        TaskRate(t, sum(1 for s in g if s.scored and s.reward.passed), sum(1 for s in g if s.scored), len(g))
        for t, g in zip(tasks, groups)
    ]


def bucket(rate: float | None, too_easy: float, too_hard: float) -> str:
    """The difficulty bucket of a pass rate."""
    if rate is None:
        return "unjudged"
    if rate >= too_easy:
        return "too_easy"
    if rate <= too_hard:
        return "too_hard"
    return "learnable"


def stratify(
    rates: Sequence[TaskRate], too_easy: float = 1.0, too_hard: float = 0.0, order: str = "curriculum", seed: int = 0
) -> tuple[list[Task], list[Task], dict[str, Any]]:
    """(every task with `difficulty` = 1 - pass rate, the RL set, a report of counts and rates)."""
    if too_hard >= too_easy:
        raise UserError(f"too_hard ({too_hard}) must be below too_easy ({too_easy})")
    stratified, learnable, counts = [], [], {b: 0 for b in BUCKETS}
    per_task = []
    for r in rates:
        rate = r.pass_rate
        name = bucket(rate, too_easy, too_hard)
        counts[name] += 1
        task = r.task.model_copy(update={"difficulty": None if rate is None else round(1.0 - rate, 6)})
        stratified.append(task)
        if name == "learnable":
            learnable.append(task)
        per_task.append(
            {
                "id": task.id,
                "passed": r.passed,
                "judged": r.judged,
                "samples": r.samples,
                "pass_rate": rate,
                "bucket": name,
            }
        )
    if order == "curriculum":
        learnable.sort(key=lambda t: t.difficulty)  # stable: ties keep their order
    elif order == "shuffle":
        random.Random(seed).shuffle(learnable)
    judged = [r.pass_rate for r in rates if r.pass_rate is not None]
    hist = {f"{i / 10:.1f}-{(i + 1) / 10:.1f}": 0 for i in range(10)}
    for p in judged:
        i = min(int(p * 10), 9)
        hist[f"{i / 10:.1f}-{(i + 1) / 10:.1f}"] += 1
    report = {
        "tasks": len(rates),
        "buckets": counts,
        "rl_set": len(learnable),
        "mean_pass_rate": sum(judged) / len(judged) if judged else None,
        "pass_rate_histogram": hist,
        "per_task": per_task,
    }
    return stratified, learnable, report


def stratify_stage(cfg: StratifyConfig, force: bool = False) -> StageSpec:
    inputs = input_list([(cfg.tasks.source, "tasks")])
    return StageSpec(
        "stratify", cfg.out, cfg.name, cfg.model_dump(), inputs, cfg.model, 1, cfg.seed, cfg.threads, force
    )


def load_task_source(s: TaskSourceSettings) -> list[Task]:
    from tempering.sources.tasks import load_tasks

    tasks = load_tasks(s)
    if not tasks:
        raise UserError(f"task source {s.source!r}: no tasks")
    return tasks


def sample_task_source(
    cfg: Any, n: int, label: str, console: Console
) -> tuple[list[Task], list[list[Trajectory]], str]:
    """(tasks, their groups of `n` verified samples, the engine's identity) of a stratify or synth config: its task source
    sampled through its engine, with its sampling settings, seed, batching and reward workers."""
    from tempering.rollout.select import load_engine

    tasks = load_task_source(cfg.tasks)
    engine = load_engine(cfg.engine, cfg.model, cfg.precision)
    groups = sample_tasks(
        tasks,
        engine,
        cfg.sampling,
        n,
        seed=cfg.seed,
        batch_prompts=cfg.batch_prompts,
        reward_workers=cfg.reward_workers,
        label=label,
        console=console,
    )
    return tasks, groups, engine.identity


def run_stratify(cfg: StratifyConfig, force: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Measure, bucket and write; the run is recorded (inputs: tasks, base model)."""
    console = console or Console(stderr=True)
    with run_stage(stratify_stage(cfg, force)) as stage:
        if stage.finished:
            return stage.summary
        tasks, groups, generator_hash = sample_task_source(cfg, cfg.k, "stratify", console)
        if why := unjudged_reasons(groups):
            console.print(f"[yellow]warning:[/yellow] stratify: {why}", highlight=False, markup=True)
        stratified, rl_set, report = stratify(
            pass_rates(tasks, groups), cfg.too_easy, cfg.too_hard, cfg.order, cfg.seed
        )
        outputs = {}
        for key, rows in (("stratified", stratified), ("rl_set", rl_set)):
            path = stage.run_dir / f"{key}.jsonl"
            _, digest = write_jsonl_atomic(path, (t.model_dump(exclude_none=True) for t in rows), sidecar=True)
            stage.record_output(key, path)
            outputs[key], report[f"{key}_sha256"] = str(path), digest
        write_jsonl_atomic(stage.run_dir / "pass_rates.jsonl", report.pop("per_task"), sidecar=True)
        summary = {
            "steps": 1,
            "model": cfg.model,
            "generator_hash": generator_hash,
            "k": cfg.k,
            "sampling": cfg.sampling.model_dump(),
            **report,
            **{f"{k}_file": v for k, v in outputs.items()},
            "pass_rates": str(stage.run_dir / "pass_rates.jsonl"),
        }
        stage.finish(summary, outputs)
    return stage.summary
