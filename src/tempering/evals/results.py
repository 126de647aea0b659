"""The evaluation results file: what a suite run writes and compare / gate / report read.

One `EvalResults` JSON per evaluated model. Results hold ids, numbers and settings, never
task text, so a results file of a private suite can be shared. Per-task scores are kept
(task id -> per-sample scores of the suite's primary metric) because paired comparisons
between two models need them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tempering import __version__
from tempering.data.longctx import id_length
from tempering.errors import InputNotFound, UserError
from tempering.evals.stats import (
    Comparison,
    ParaphraseSpread,
    Stability,
    bootstrap_ci,
    paired_bootstrap,
    seed_spread,
    task_means,
)

SCHEMA_VERSION = 1


class MetricResult(BaseModel):
    """One metric of one suite: mean over tasks with its bootstrap interval and seed spread."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    mean: float
    low: float | None = None
    """Lower end of the confidence interval (bootstrap over tasks)."""
    high: float | None = None
    """Upper end of the confidence interval."""
    n: int = Field(ge=0)
    """Number of tasks the mean is over."""
    per_seed: list[float] = Field(default_factory=list)
    """The metric measured once per sampling seed, when several seeds were run."""
    std: float | None = None
    """Standard deviation (ddof=1) of `per_seed`; None with fewer than two seeds."""

    @classmethod
    def from_scores(
        cls,
        name: str,
        task_scores,
        *,
        per_seed: Sequence[float] = (),
        level: float = 0.95,
        resamples: int = 2000,
        seed: int = 0,
    ) -> MetricResult:
        """Mean and interval from per-task scores (or per-task sample lists), plus seed spread."""
        est = bootstrap_ci(task_scores, level=level, resamples=resamples, seed=seed)
        std = seed_spread(per_seed).std if per_seed else None
        return cls(name=name, mean=est.mean, low=est.low, high=est.high, n=est.n, per_seed=list(per_seed), std=std)


def no_tasks_at(suite: str, length: int, lengths: Sequence[int]) -> str:
    """The one-line problem of asking `suite` for a length its task ids do not name."""
    have = ", ".join(map(str, lengths)) or "none: its task ids name no length"
    return f"suite {suite!r} has no tasks at length {length} (lengths: {have})"


# what a suite's result at one length keeps of the whole result (the rest are whole-run facts)
_IDENTITY = {
    "suite_hash",
    "source",
    "limit",
    "track",
    "private",
    "model_id",
    "model_hash",
    "sampling",
    "primary_metric",
}


class SuiteResult(BaseModel):
    """One suite evaluated on one model."""

    model_config = ConfigDict(extra="forbid")
    suite: str = Field(min_length=1)
    suite_hash: str = Field(min_length=1)
    """Content hash of the suite's tasks; two runs compare only when it matches."""
    source: str | None = None
    """The suite file the result was run from (absolute path), so a gate verdict can be checked
    against the suite as it is now; None for a suite built in memory."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many tasks per task source were run (a subset, with its own suite hash)."""
    track: str = "general"
    """Capability track the suite belongs to (a gate rule may name a track)."""
    private: bool = False
    """Held-out suite: its task text never leaves the evaluation machine."""
    model_id: str = Field(min_length=1)
    model_hash: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Generation settings used (temperature, top_p, max_tokens, samples, seeds)."""
    metrics: dict[str, MetricResult]
    primary_metric: str
    """The metric that `task_scores` holds and that comparisons use."""
    task_scores: dict[str, list[float]] = Field(default_factory=dict)
    """Task id -> per-sample scores of the primary metric (ids only, no task text)."""
    metric_task_scores: dict[str, dict[str, list[float]]] = Field(default_factory=dict)
    """Each other metric -> its task id -> per-sample scores, as `task_scores` holds the
    primary one (a gate rule may name `<suite>.<metric>`)."""
    stability: Stability | None = None
    paraphrase: ParaphraseSpread | None = None
    truncation_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of generations cut off at the token limit."""
    contamination_hits: int = Field(default=0, ge=0)
    """Training rows found to contain this suite's tasks (see evals.contamination)."""
    contaminated_rows: list[str] = Field(default_factory=list)
    """Those training rows, by their `id` (else path:line) and file; never task text or ids."""
    verifier_errors: int = Field(default=0, ge=0)
    """Samples the verifier could not judge (it crashed or timed out): left out of every metric, never
    scored as model failures."""
    notes: list[str] = Field(default_factory=list)
    """What the run could not do as the suite asks, e.g. a pass@k skipped for too few samples."""

    @model_validator(mode="after")
    def _consistent(self) -> SuiteResult:
        for key, metric in self.metrics.items():
            if key != metric.name:
                raise ValueError(f"metrics[{key!r}] is named {metric.name!r}")
        if self.primary_metric not in self.metrics:
            raise ValueError(f"primary_metric {self.primary_metric!r} is not among metrics {sorted(self.metrics)}")
        empty = [task for task, scores in self.task_scores.items() if not scores]
        if empty:
            raise ValueError(f"task_scores of {empty[0]!r} is empty")
        unknown = sorted(set(self.metric_task_scores) - set(self.metrics))
        if unknown:
            raise ValueError(f"metric_task_scores of {unknown[0]!r}, which is not among metrics {sorted(self.metrics)}")
        return self

    def scores_of(self, metric: str) -> dict[str, list[float]]:
        """Task id -> per-sample scores of `metric` (empty when the run kept none for it)."""
        return self.task_scores if metric == self.primary_metric else self.metric_task_scores.get(metric, {})

    def lengths(self) -> list[int]:
        """The lengths its task ids name (`-L4096-`, as long-context suites' ids do), ascending."""
        return sorted({n for task in self.task_scores if (n := id_length(task)) is not None})

    def at_length(self, length: int) -> SuiteResult:
        """This suite over only its tasks whose id names `length`, as the suite `<suite>@<length>`.

        Each metric with per-task scores is recomputed over those tasks (mean over tasks, its
        bootstrap interval); a metric without them is left out, and so is what only the whole
        run measured (seeds, stability, paraphrases, truncation, contamination). The suite hash
        stays, so two runs' restrictions pair task by task as their whole suites do.

        Raises:
            ValueError: no task id names `length` (the message lists the lengths that exist).
        """

        def kept(scores: dict[str, list[float]]) -> dict[str, list[float]]:
            return {task: s for task, s in scores.items() if id_length(task) == length}

        task_scores = kept(self.task_scores)
        if not task_scores:
            raise UserError(no_tasks_at(self.suite, length, self.lengths()))
        others = {m: k for m, scores in self.metric_task_scores.items() if (k := kept(scores))}
        per_metric = {self.primary_metric: task_scores, **others}
        return SuiteResult(
            **self.model_dump(include=_IDENTITY),
            suite=f"{self.suite}@{length}",
            metrics={m: MetricResult.from_scores(m, list(scores.values())) for m, scores in per_metric.items()},
            task_scores=task_scores,
            metric_task_scores=others,
        )


class EvalResults(BaseModel):
    """Every suite evaluated for one model, as saved to `results.json`."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = SCHEMA_VERSION
    model: str = Field(min_length=1)
    created: datetime = Field(default_factory=lambda: datetime.now(UTC))
    tempering_version: str = __version__
    suites: list[SuiteResult]

    @model_validator(mode="after")
    def _unique_suites(self) -> EvalResults:
        names = [s.suite for s in self.suites]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"suite(s) listed twice: {', '.join(repeated)}")
        return self

    def suite(self, name: str) -> SuiteResult:
        for s in self.suites:
            if s.suite == name:
                return s
        raise KeyError(f"no suite {name!r} in results for {self.model} (have: {', '.join(self.suite_names())})")

    def suite_names(self) -> list[str]:
        return [s.suite for s in self.suites]

    def by_length(self) -> EvalResults:
        """Every suite whose task ids name lengths, split into one suite `<suite>@<length>` per
        length (see `SuiteResult.at_length`); suites whose ids name none are left out."""
        split = [s.at_length(n) for s in self.suites for n in s.lengths()]
        return EvalResults(
            model=self.model, created=self.created, tempering_version=self.tempering_version, suites=split
        )

    def save(self, path: str | Path) -> Path:
        """Write as indented JSON (via a temporary file, so readers never see half a file)."""
        from tempering.atomic import write_text_atomic

        return write_text_atomic(path, self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> EvalResults:
        """Read a results file; errors name the file and the offending field."""
        path = Path(path)
        if not path.is_file():
            raise InputNotFound(f"results file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise UserError(f"{path}: results schema v{version} is newer than this Tempering (v{SCHEMA_VERSION})")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(x) for x in e["loc"]) or "top level"
            raise UserError(f"{path}: {where}: {e['msg']}") from None


@dataclass(frozen=True)
class SuiteComparison:
    """Candidate vs base on one suite's primary metric, paired by task."""

    suite: str
    track: str
    metric: str
    base_mean: float
    candidate_mean: float
    comparison: Comparison  # delta = candidate - base

    def to_dict(self) -> dict:
        return asdict(self)


def _paired_scores(
    base: SuiteResult, cand: SuiteResult, metric: str | None = None
) -> tuple[list[list[float]], list[list[float]]]:
    """Per-task sample lists of `metric` (default: the primary) of both runs, aligned by task
    id; raises when they cannot pair."""
    name = cand.suite
    if base.suite_hash != cand.suite_hash:
        raise UserError(
            f"suite {name!r}: base and candidate ran different suite versions "
            f"(hash {base.suite_hash} vs {cand.suite_hash})"
        )
    if base.primary_metric != cand.primary_metric:
        raise UserError(
            f"suite {name!r}: primary metric {base.primary_metric!r} (base) vs {cand.primary_metric!r} (candidate)"
        )
    metric = metric or cand.primary_metric
    a, b = base.scores_of(metric), cand.scores_of(metric)
    if not a or not b:
        raise UserError(
            f"suite {name!r}: per-task scores of {metric} missing, cannot pair (base "
            f"{len(a)} tasks, candidate {len(b)})"
        )
    only_base, only_cand = a.keys() - b.keys(), b.keys() - a.keys()
    if only_base or only_cand:
        raise UserError(
            f"suite {name!r}: base and candidate scored different tasks "
            f"({len(only_base)} only in base, {len(only_cand)} only in candidate)"
        )
    ids = sorted(b)
    return [a[t] for t in ids], [b[t] for t in ids]


def compare_metrics(
    base: EvalResults, cand: EvalResults, *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> list[SuiteComparison]:
    """Paired bootstrap of every non-primary metric both runs kept per-task scores of, per
    shared suite (what `no significant regression on <suite>.<metric>` reads)."""
    in_base = {s.suite: s for s in base.suites}
    out = []
    for cand_suite in cand.suites:
        base_suite = in_base.get(cand_suite.suite)
        if base_suite is None or base_suite.suite_hash != cand_suite.suite_hash:
            continue
        for metric in sorted(cand_suite.metric_task_scores.keys() & base_suite.metric_task_scores.keys()):
            a, b = _paired_scores(base_suite, cand_suite, metric)
            cmp = paired_bootstrap(a, b, level=level, resamples=resamples, seed=seed)
            out.append(
                SuiteComparison(
                    suite=cand_suite.suite,
                    track=cand_suite.track,
                    metric=metric,
                    base_mean=float(task_means(a).mean()),
                    candidate_mean=float(task_means(b).mean()),
                    comparison=cmp,
                )
            )
    return out


def compare(
    base: EvalResults, cand: EvalResults, *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> list[SuiteComparison]:
    """Paired bootstrap of candidate vs base for every suite present in both (candidate order).

    Suites in only one of the two are skipped (a gate rule that names one fails there).

    Raises:
        ValueError: when a shared suite cannot be paired (different suite hash, primary
            metric or task ids, or no per-task scores).
    """
    in_base = {s.suite: s for s in base.suites}
    out = []
    for cand_suite in cand.suites:
        base_suite = in_base.get(cand_suite.suite)
        if base_suite is None:
            continue
        a, b = _paired_scores(base_suite, cand_suite)
        cmp = paired_bootstrap(a, b, level=level, resamples=resamples, seed=seed)
        out.append(
            SuiteComparison(
                suite=cand_suite.suite,
                track=cand_suite.track,
                metric=cand_suite.primary_metric,
                base_mean=float(task_means(a).mean()),
                candidate_mean=float(task_means(b).mean()),
                comparison=cmp,
            )
        )
    return out
