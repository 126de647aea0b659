"""Run one eval suite on one model: batched sampling, threaded scoring, every statistic.

    result = run_suite(load_suite("arithmetic-add"), build_engine(EngineSettings(kind="hf"), model, tokenizer, "auto"), seeds=3)

What a run does:
  1. renders each task's prompt through each template (chat template of the model);
  2. samples `n` completions per prompt and scores them through the one rollout path
     (`rollout.rollout.start_rollout`, the path GRPO trains on), a chunk of prompts at a
     time (as many prompts as keep rows x (longest prompt + token limit) within
     `batch_tokens`, bounding the KV cache; one prefill per prompt shared by its samples);
     the canonical template runs once per seed, each paraphrase template once (first seed);
  3. scoring runs in reward workers while the next chunk generates. A sample the verifier
     could not judge (it raised or timed out: status `verifier_error` / `timeout`) is
     skipped and counted, never scored as a model failure;
  4. computes the metrics: mean over tasks with a bootstrap interval over tasks (samples of
     all seeds pooled per task), the metric per seed and its spread, unbiased pass@k from all
     samples of a task, stability over seeds (each seed is a repeat), paraphrase spread over
     templates (first seed), and the truncation rate. A pass@k needing more samples than
     drawn is skipped with a note in the result (the first computable metric is primary).

Every generation comes back as a `samples.jsonl` record (`sample_record`).

Determinism: every chunk's sampling seed derives from (seed, template, chunk), so the same
model, suite, seeds and batch size give identical results. Results are cached on disk
(`evals.cache`) under model hash + suite hash + those settings.

Privacy: for a private suite, task ids in the result are replaced by salted hashes (the
salt is the suite's content hash, so they pair between runs of the same suite yet reveal
nothing), and progress lines carry counts only.
"""

from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tempering.evals.cache import ResultCache, cache_key
from tempering.evals.results import MetricResult, SuiteResult
from tempering.evals.stats import paraphrase_spread, pass_at_k, stability, truncation_rate
from tempering.evals.suite import Suite, SuiteError, metric_k, render_messages
from tempering.rollout.rollout import PendingRollout, ThreadRewardWorkers, start_rollout, unjudged_reasons
from tempering.types import Reward, Trajectory

RUNNER_VERSION = 4  # bump when generation or scoring changes what a cached result would hold
DEFAULT_BATCH_TOKENS = 32768


@dataclass(frozen=True)
class SampleScore:
    value: float
    passed: bool


@dataclass
class _Pass:
    """The samples of one template under one seed: per task, its scored trajectories."""

    template: int
    seed: int
    trajectories: list[list[Trajectory]]

    @cached_property
    def samples(self) -> list[list[SampleScore]]:
        """Per task, the judged samples (verifier errors and timeouts left out)."""
        return [
            [SampleScore(t.reward.value, sample_passed(t.reward)) for t in trajs if t.scored]
            for trajs in self.trajectories
        ]

    @property
    def truncated(self) -> list[bool]:
        return [t.truncated for trajs in self.trajectories for t in trajs]

    @property
    def errors(self) -> int:
        return sum(not t.scored for trajs in self.trajectories for t in trajs)


def sample_passed(reward: Reward) -> bool:
    """A sample is correct by `Reward.passed` (the rule GRPO's sample accuracy uses too)."""
    return reward.passed


def run_suite(suite: Suite, engine, **kwargs: Any) -> SuiteResult:
    """Evaluate `suite` with `engine`; see `run_suite_samples` (this drops the samples)."""
    return run_suite_samples(suite, engine, **kwargs)[0]


def run_suite_samples(
    suite: Suite,
    engine,
    *,
    seeds: int | None = None,
    first_seed: int = 0,
    samples: int | None = None,
    model_id: str = "model",
    model_hash: str | None = None,
    cache_dir: str | Path | None = None,
    workers: int = 8,
    reward_workers: Any = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    log: Callable[[str], None] | None = None,
) -> tuple[SuiteResult, list[dict[str, Any]]]:
    """Evaluate `suite` with `engine` (a rollout engine); see the module docstring.

    Args:
        seeds, samples: override the suite's seed count and samples per task.
        first_seed: the seeds are first_seed .. first_seed + seeds - 1.
        model_id: the name recorded in the result (e.g. the model spec).
        model_hash: identity of the weights (`evals.cache.model_dir_hash`); the engine's
            `identity` when None.
        cache_dir: where results are cached; None disables the cache.
        workers: scoring threads (sandboxed code judging runs ~0.1-0.2 s per sample).
        reward_workers: a `RewardWorkers` to score with instead (e.g. Ray actors), not closed here.
        batch_tokens: budget of rows x (longest prompt + max_new_tokens) per decode batch
            (its KV cache: ~1.5 GB at the default for a 135M model in fp32).
    Returns:
        The result and one record per generation (`sample_record`), in generation order.
    Raises:
        SuiteError: no metric of the suite can be computed from the samples drawn, or bad tasks.
    """
    suite = suite.with_overrides(seeds=seeds, samples=samples)
    if not suite.computable_metrics():
        raise SuiteError(
            f"suite {suite.name!r}: no metric can be computed from {suite.sampling.n} sample(s) x "
            f"{suite.seeds} seed(s) per task ({', '.join(suite.metrics)})"
        )
    log = log or (lambda _: None)
    model_hash = model_hash or engine.identity
    settings = {
        "temperature": suite.sampling.temperature,
        "top_p": suite.sampling.top_p,
        "max_new_tokens": suite.sampling.max_new_tokens,
        "samples": suite.sampling.n,
        "seeds": list(range(first_seed, first_seed + suite.seeds)),
        "templates": len(suite.templates),
        "precision": engine.precision,
        "batch_tokens": batch_tokens,
        "engine": type(engine).__name__,
    }  # engines draw different (equally valid) samples per seed
    key = cache_key(runner=RUNNER_VERSION, model=model_hash, suite=suite.full_hash, **settings)
    cache = ResultCache(cache_dir) if cache_dir is not None else None
    if cache is not None and (hit := cache.get(key)) is not None:
        log(f"{suite.name}: cached result ({key[:12]})")
        return hit[0].model_copy(update={"model_id": model_id, **_origin(suite)}), hit[1]
    passes = _sample_and_score(suite, settings["seeds"], engine, workers, batch_tokens, log, reward_workers)
    result = _suite_result(suite, passes, model_id, model_hash, settings)
    records = [r for p in passes for r in sample_records(suite, p)]
    if cache is not None:
        cache.put(key, result, records)
    return result, records


# ---------------------------------------------------------------------------- sampling + scoring


def _chunk_seed(seed: int, template: int, chunk: int) -> int:
    digest = hashlib.sha256(f"eval:{seed}:{template}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def _sample_and_score(
    suite: Suite,
    seeds: list[int],
    engine,
    workers: int,
    batch_tokens: int,
    log: Callable[[str], None],
    reward_workers: Any = None,
) -> list[_Pass]:
    """Generate every pass (template, seed) in order; scoring runs in the pool meanwhile."""
    plan = [(0, seed) for seed in seeds] + [(t, seeds[0]) for t in range(1, len(suite.templates))]
    with nullcontext(reward_workers) if reward_workers is not None else ThreadRewardWorkers(workers) as pool:
        pending = [(t, seed, _generate_pass(suite, t, seed, engine, pool, batch_tokens, log)) for t, seed in plan]
        passes = [_Pass(t, seed, p.collect()) for t, seed, p in pending]
    if why := unjudged_reasons([t for p in passes for t in p.trajectories]):
        log(f"{suite.name}: {why}; skipped")
    return passes


def _generate_pass(
    suite: Suite, template: int, seed: int, engine, pool: Any, batch_tokens: int, log: Callable[[str], None]
) -> PendingRollout:
    """Sample all tasks under one template and seed, a chunk of similar-length prompts at a time."""
    t0, tasks, s = time.perf_counter(), suite.task_list, suite.sampling
    messages = [render_messages(t, suite.templates[template]) for t in tasks]
    prompts = [engine.chat_prompt(m) for m in messages]
    _check_window(suite, [t.id for t in tasks], prompts, getattr(engine, "context_window", None))
    order = sorted(range(len(tasks)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    per_chunk = max(1, batch_tokens // (s.n * (len(prompts[order[-1]]) + s.max_new_tokens)))
    chunks = [
        (order[start : start + per_chunk], _chunk_seed(seed, template, c))
        for c, start in enumerate(range(0, len(order), per_chunk))
    ]
    pending = start_rollout(tasks, engine, s, pool, n=s.n, messages=messages, prompts=prompts, chunks=chunks)
    log(
        f"{suite.name}: template {template + 1}/{len(suite.templates)}, seed {seed}: "
        f"{len(tasks) * s.n} samples generated in {time.perf_counter() - t0:.1f}s"
    )
    return pending


def _check_window(suite: Suite, task_ids: list[str], prompts: list[Any], window: int | None) -> None:
    """SuiteError for the longest prompt that leaves no position for an answer in the model's
    window (answers that would pass the window are cut there by the batching engine)."""
    if window is None or not prompts:
        return
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    if len(prompts[longest]) >= window:
        raise SuiteError(
            f"suite {suite.name!r}: task {_public_id(suite, task_ids[longest])!r} has a prompt of "
            f"{len(prompts[longest])} tokens; the model's window is {window} tokens"
        )


def sample_record(suite: Suite, template: int, seed: int, trajectory: Trajectory) -> dict[str, Any]:
    """One line of `samples.jsonl`: a generation and its judgement.

    Private suites: the task id is the salted hash results use, and the prompt, the
    completion and the verifier's detail (which may quote either) are left out.
    """
    reward = trajectory.reward
    record: dict[str, Any] = {
        "suite": suite.name,
        "task_id": _public_id(suite, trajectory.task_id),
        "template": template,
        "seed": seed,
        "sample": trajectory.sample,
    }
    if not suite.private:
        prompt = next((m.get("content") or "" for m in reversed(trajectory.messages) if m["role"] == "user"), "")
        record.update(prompt=prompt, completion=trajectory.completion)
    record.update(
        reward=reward.value,
        passed=sample_passed(reward),
        status=trajectory.status,
        components=reward.components,
        finish_reason=trajectory.finish_reason,
    )
    if not suite.private:
        record["detail"] = reward.detail
    return record


def sample_records(suite: Suite, run: _Pass) -> list[dict[str, Any]]:
    return [sample_record(suite, run.template, run.seed, t) for trajs in run.trajectories for t in trajs]


# ---------------------------------------------------------------------------- metrics


def task_metric(metric: str, samples: Sequence[SampleScore]) -> float | None:
    """One task's value of `metric` from its judged samples; None when it cannot be computed."""
    k = metric_k(metric)
    if not samples or (k is not None and len(samples) < k):
        return None
    if metric == "accuracy":
        return float(np.mean([s.passed for s in samples]))
    if metric == "mean_reward":
        return float(np.mean([s.value for s in samples]))
    if k is None:
        raise ValueError(f"unknown metric {metric!r} (accuracy, mean_reward or pass@k)")
    return pass_at_k(len(samples), sum(s.passed for s in samples), k)


def suite_metric(metric: str, per_task: Sequence[Sequence[SampleScore]]) -> float | None:
    """Mean over tasks of `metric`, over the tasks where it can be computed."""
    values = [v for v in (task_metric(metric, s) for s in per_task) if v is not None]
    return float(np.mean(values)) if values else None


def _metric_samples(metric: str, samples: Sequence[SampleScore]) -> list[float]:
    """Per-sample scores of `metric` for `task_scores` (their mean is the task's value)."""
    if metric == "accuracy" or metric == "pass@1":
        return [float(s.passed) for s in samples]
    if metric == "mean_reward":
        return [s.value for s in samples]
    value = task_metric(metric, samples)
    return [value] if value is not None else []


def _origin(suite: Suite) -> dict[str, Any]:
    """Where the suite was read from and its task limit: what re-checking its hash later needs."""
    return {"source": str(suite.path.resolve()) if suite.path else None, "limit": suite.limit}


def _suite_result(suite: Suite, passes: list[_Pass], model_id: str, model_hash: str, settings: dict) -> SuiteResult:
    canonical = [p for p in passes if p.template == 0]
    pooled = [[s for p in canonical for s in p.samples[i]] for i in range(len(suite.task_list))]
    metrics, computable = {}, suite.computable_metrics()
    notes = [
        f"{name} skipped: needs >= {metric_k(name)} samples per task, got {suite.sampling.n} x {suite.seeds} seed(s)"
        for name in suite.metrics
        if name not in computable
    ]
    for name in computable:
        values = {i: v for i, v in enumerate(task_metric(name, s) for s in pooled) if v is not None}
        if not values:
            raise SuiteError(
                f"suite {suite.name!r}: no task could be scored for {name} "
                f"({sum(p.errors for p in passes)} verifier errors)"
            )
        per_seed = [suite_metric(name, p.samples) for p in canonical]
        per_seed = [v for v in per_seed if v is not None] if len(canonical) > 1 else []
        metrics[name] = MetricResult.from_scores(name, list(values.values()), per_seed=per_seed)
    primary = computable[0]
    ids = [_public_id(suite, t.id) for t in suite.task_list]

    def per_task(name: str) -> dict[str, list[float]]:
        return {ids[i]: _metric_samples(name, s) for i, s in enumerate(pooled) if task_metric(name, s) is not None}

    task_scores, others = per_task(primary), {name: per_task(name) for name in computable[1:]}
    # metric measured per seed / per template: the primary one when one seed's samples suffice
    per_pass = primary if (metric_k(primary) or 1) <= suite.sampling.n else "accuracy"
    return SuiteResult(
        suite=suite.name,
        suite_hash=suite.hash,
        **_origin(suite),
        track=suite.track,
        private=suite.private,
        model_id=model_id,
        model_hash=model_hash,
        sampling=settings,
        metrics=metrics,
        primary_metric=primary,
        task_scores=task_scores,
        metric_task_scores=others,
        stability=_stability(per_pass, canonical),
        paraphrase=_paraphrase(per_pass, passes, suite.templates),
        truncation_rate=truncation_rate([t for p in canonical for t in p.truncated]),
        verifier_errors=sum(p.errors for p in passes),
        notes=notes,
    )


def _stability(metric: str, canonical: list[_Pass]):
    if len(canonical) < 2:
        return None
    rows = []
    for i in range(len(canonical[0].samples)):
        values = [task_metric(metric, p.samples[i]) for p in canonical]
        if all(v is not None for v in values):
            rows.append(values)
    return stability(np.array(rows)) if rows else None


def _paraphrase(metric: str, passes: list[_Pass], templates: list[str]):
    first_seed = [p for p in passes if p.seed == passes[0].seed]
    if len(first_seed) < 2:
        return None
    by_template = {templates[p.template]: suite_metric(metric, p.samples) for p in first_seed}
    values = [v for v in by_template.values() if v is not None]
    return paraphrase_spread(values) if len(values) >= 2 else None


def _public_id(suite: Suite, task_id: str) -> str:
    """The task id as results show it: itself, or a salted hash for a private suite."""
    if not suite.private:
        return task_id
    return "t-" + hashlib.sha256(f"{suite.full_hash}\0{task_id}".encode()).hexdigest()[:16]
