"""Best-of-n with a reward model: sample n answers per task, keep the one the RM scores highest.

Sampling and the tasks' own verdicts go through the one rollout path; the reward model
ranks each task's n answers in their conversation (`RewardScorer`). The verifier's verdict
is only used to *measure* the ranking: the RM's pick against a random pick (the mean
sample accuracy) and against the oracle (any of the n correct, pass@n).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tempering.atomic import write_jsonl_atomic
from tempering.config import BestOfNSettings, SamplingSettings
from tempering.types import Task


def best_of_n(
    tasks: Sequence[Task],
    engine: Any,
    scorer: Any,
    sampling: SamplingSettings,
    n: int,
    seed: int = 0,
    workers: Any = None,
) -> list[dict[str, Any]]:
    """One record per task: the n answers, their RM scores and verdicts, and the pick.

    Args:
        engine: an `Engine` sampling the candidates.
        scorer: anything with `score(conversations) -> list[float]` (a `RewardScorer`).
        workers: `RewardWorkers` for the tasks' verifiers (default: a local thread pool).
    Returns:
        dicts with task_id, completions, scores, passed (per answer), pick (index), pick_passed.
    """
    from tempering.rollout.rollout import ThreadRewardWorkers, rollout

    own = workers is None
    workers = ThreadRewardWorkers(2) if own else workers
    try:
        groups = rollout(tasks, engine, sampling, workers, n=n, seed=seed)
    finally:
        if own:
            workers.close()
    out = []
    for task, group in zip(tasks, groups):
        scores = scorer.score([t.messages for t in group])
        pick = max(range(len(group)), key=lambda j: scores[j])
        passed = [bool(t.scored and t.reward.passed) for t in group]
        out.append(
            {
                "task_id": task.id,
                "completions": [t.completion for t in group],
                "scores": scores,
                "passed": passed,
                "pick": pick,
                "pick_passed": passed[pick],
            }
        )
    return out


def summarize(records: list[dict[str, Any]], n: int, seed: int = 0) -> dict[str, Any]:
    """Accuracy of the RM's pick (with CI), of a random pick, and of the oracle (any correct)."""
    from tempering.evals.stats import bootstrap_ci, paired_bootstrap

    pick = [float(r["pick_passed"]) for r in records]
    rand = [sum(r["passed"]) / len(r["passed"]) for r in records]
    gain = paired_bootstrap(rand, pick, seed=seed)
    return {
        "n": n,
        "tasks": len(records),
        "rm_pick": sum(pick) / len(pick),
        "rm_pick_ci": bootstrap_ci(pick, seed=seed).to_dict(),
        "random_pick": sum(rand) / len(rand),
        "oracle": sum(any(r["passed"]) for r in records) / len(records),
        "gain_over_random": gain.to_dict(),
    }


def run_best_of_n(
    settings: BestOfNSettings, reward_model: str | Path, precision: str = "auto", out: str | Path | None = None
) -> dict[str, Any]:
    """Load the policy and the reward model, run `best_of_n` on the settings' tasks, summarize.

    `out`: a JSONL file for the per-task records (None: not written).
    """
    from tempering.rollout.select import load_engine
    from tempering.sources.tasks import load_tasks
    from tempering.verifiers.reward_model import RewardScorer

    scorer = RewardScorer.load(reward_model, precision)  # first: a wrong path fails before the policy loads
    tasks = load_tasks(settings.tasks)
    engine = load_engine(settings.engine, settings.policy, precision)
    sampling = SamplingSettings(**{k: getattr(settings, k) for k in SamplingSettings.model_fields})
    records = best_of_n(tasks, engine, scorer, sampling, settings.n, settings.seed)
    if out is not None:
        write_jsonl_atomic(out, records, sidecar=False)
    return summarize(records, settings.n, settings.seed)
