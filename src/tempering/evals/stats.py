"""Statistics for evaluation results. Pure functions over numpy arrays; no I/O.

The unit of resampling is the *task*: a suite is a sample of tasks from a larger population,
so confidence intervals come from bootstrapping tasks. Where a task was sampled several
times (k samples, several seeds), its score is first averaged over those samples and the
task mean is what gets resampled; the spread between samples of one task then shows up
through the spread of task means, which is what a task-level (clustered) bootstrap wants.

Intervals are percentile bootstrap intervals. For means of bounded scores over ~50+ tasks
they cover close to the nominal level (the tests measure 95.6% at the 95% level on Bernoulli
tasks, n=100); BCa would buy little there and is harder to check by hand.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

# Resample indices drawn per block (512 KiB of int64): small blocks stay in cache.
_BOOTSTRAP_BLOCK = 1 << 16


@dataclass(frozen=True)
class Estimate:
    """A mean over `n` tasks with a two-sided confidence interval [low, high]."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """Paired difference `delta` = mean(b) - mean(a) over the same `n` tasks.

    `significant` is True when the confidence interval [low, high] excludes 0.
    """

    delta: float
    low: float
    high: float
    p_value: float
    significant: bool
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SeedSpread:
    """Spread of a metric across seeds; `std` (ddof=1) is None with a single seed."""

    mean: float
    std: float | None
    min: float
    max: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Stability:
    """How much per-task results move between repeats of the same evaluation.

    mean_task_variance: mean over tasks of the population variance (ddof=0) across
        repeats; for 0/1 scores a task's variance is p(1-p), so 0 means fully repeatable.
    flip_share: share of tasks whose score is not the same in every repeat.
    repeat_std: std (ddof=1) of the suite mean across repeats (run-to-run spread).
    """

    tasks: int
    repeats: int
    mean_task_variance: float
    flip_share: float
    repeat_std: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ParaphraseSpread:
    """Accuracy across paraphrased variants of a suite: max - min and std (ddof=1)."""

    spread: float
    std: float
    min: float
    max: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which avoids huge binomials.

    Args:
        n: samples drawn for the task.
        c: samples that passed (0 <= c <= n).
        k: budget being estimated (1 <= k <= n).
    Raises:
        ValueError: on counts outside those ranges.
    """
    if not (isinstance(n, (int, np.integer)) and isinstance(c, (int, np.integer)) and isinstance(k, (int, np.integer))):
        raise ValueError(f"pass_at_k needs integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got k={k} with n={n}")
    if n - c < k:  # every k-subset holds a passing sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_scores(n: Sequence[int] | int, c: Sequence[int], k: int) -> np.ndarray:
    """Per-task pass@k for tasks with `c[i]` passes out of `n[i]` (or a shared `n`) samples."""
    counts = list(c)
    sizes = [n] * len(counts) if isinstance(n, (int, np.integer)) else list(n)
    if len(sizes) != len(counts):
        raise ValueError(f"pass@k: {len(sizes)} sample counts for {len(counts)} tasks")
    return np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(sizes, counts)])


def mean_pass_at_k(n: Sequence[int] | int, c: Sequence[int], k: int) -> float:
    """pass@k of a suite: the mean over tasks of the per-task unbiased estimate."""
    scores = pass_at_k_scores(n, c, k)
    if scores.size == 0:
        raise ValueError("pass@k of an empty suite")
    return float(scores.mean())


def task_means(scores: Sequence | np.ndarray) -> np.ndarray:
    """One score per task from either one score per task or several samples per task.

    Accepts a 1-D sequence (one score per task), a 2-D array (tasks x samples), or a
    ragged sequence of per-task sample lists; each task's samples are averaged.
    """
    if isinstance(scores, np.ndarray) and scores.ndim == 2:
        out = scores.astype(float).mean(axis=1)
    elif isinstance(scores, np.ndarray) and scores.ndim == 1:
        out = scores.astype(float)
    else:
        out = np.array([_one_task_mean(i, s) for i, s in enumerate(scores)], dtype=float)
    if out.size == 0:
        raise ValueError("no task scores")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"task scores must be finite; task {int(np.argmin(np.isfinite(out)))} is not")
    return out


def _one_task_mean(i: int, s) -> float:
    if isinstance(s, (int, float, np.number)):
        return float(s)
    samples = np.asarray(s, dtype=float)
    if samples.size == 0:
        raise ValueError(f"task {i} has no samples")
    return float(samples.mean())


def _resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of `resamples` bootstrap resamples (with replacement) of `values`, blockwise."""
    n = values.size
    rows = max(1, _BOOTSTRAP_BLOCK // n)
    out = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(start + rows, resamples)
        out[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return out


def _check_level(level: float, resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if resamples < 100:
        raise ValueError(f"need at least 100 bootstrap resamples, got {resamples}")


def bootstrap_ci(values, *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Estimate:
    """Mean of per-task scores with a percentile bootstrap interval, resampling tasks.

    Args:
        values: per-task scores, or per-task sample lists (see `task_means`).
        level: two-sided confidence level.
        resamples: bootstrap resamples.
        seed: seed of the resampling, so reports are reproducible.
    """
    _check_level(level, resamples)
    x = task_means(values)
    boot = _resampled_means(x, resamples, np.random.default_rng(seed))
    alpha = 1.0 - level
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return Estimate(float(x.mean()), float(low), float(high), int(x.size))


def paired_bootstrap(a, b, *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Comparison:
    """Compare two models on the same tasks: delta = mean(b) - mean(a), paired by task.

    Pass the base as `a` and the candidate as `b`, so a positive delta is an improvement.
    Tasks are resampled jointly (the per-task differences are bootstrapped), which removes
    task difficulty from the noise. Per-task sample lists are averaged first.

    Returns a `Comparison` whose interval is the percentile interval of the resampled
    deltas; `significant` means it excludes 0. `p_value` is two-sided: twice the smaller
    share of resampled deltas on either side of 0 (with a +1 correction, capped at 1).

    Raises:
        ValueError: when `a` and `b` cover different numbers of tasks.
    """
    _check_level(level, resamples)
    xa, xb = task_means(a), task_means(b)
    if xa.size != xb.size:
        raise ValueError(f"paired comparison needs the same tasks: {xa.size} vs {xb.size} task scores")
    diff = xb - xa
    boot = _resampled_means(diff, resamples, np.random.default_rng(seed))
    return _comparison(float(diff.mean()), boot, level, int(diff.size))


def _comparison(delta: float, boot: np.ndarray, level: float, n: int) -> Comparison:
    """A `Comparison` from the point delta and its resampled deltas (percentile interval)."""
    alpha = 1.0 - level
    low, high = (float(v) for v in np.quantile(boot, [alpha / 2, 1 - alpha / 2]))
    tail = min(np.count_nonzero(boot <= 0), np.count_nonzero(boot >= 0))
    p_value = min(1.0, 2.0 * (tail + 1) / (boot.size + 1))
    return Comparison(delta, low, high, p_value, bool(low > 0 or high < 0), n)


def stratified_paired_bootstrap(
    a: Mapping[str, Sequence | np.ndarray],
    b: Mapping[str, Sequence | np.ndarray],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Comparison:
    """The mean over strata (e.g. domains) of each stratum's paired gain mean(b) - mean(a).

    Each stratum weighs the same whatever its number of tasks. Tasks are resampled within their
    stratum (each keeps its size), per-task sample lists averaged first (see `task_means`).
    `n` is the number of tasks over all strata.

    Raises:
        ValueError: when `a` and `b` name different strata or a stratum's task counts differ.
    """
    _check_level(level, resamples)
    if set(a) != set(b) or not a:
        raise ValueError(f"stratified comparison needs the same non-empty strata: {sorted(a)} vs {sorted(b)}")
    rng = np.random.default_rng(seed)
    diffs = []
    for name in sorted(a):
        xa, xb = task_means(a[name]), task_means(b[name])
        if xa.size != xb.size:
            raise ValueError(f"stratum {name!r}: {xa.size} vs {xb.size} task scores")
        diffs.append(xb - xa)
    boot = np.mean([_resampled_means(d, resamples, rng) for d in diffs], axis=0)
    delta = float(np.mean([d.mean() for d in diffs]))
    return _comparison(delta, boot, level, sum(d.size for d in diffs))


def bootstrap_statistic(
    statistic: Callable[..., float],
    *columns: Sequence[float] | np.ndarray,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """A statistic other than a mean (a ratio, a rate among some tasks) with a percentile
    interval from resampling tasks.

    Each column holds one value per task (the same tasks, in the same order); every resample
    draws task indices once and passes each column, indexed by them, to `statistic`. Resamples
    where the statistic is not finite (a ratio over a zero denominator) are left out. `mean` of
    the result is the statistic on the data as given.

    Raises:
        ValueError: on columns of different lengths, no tasks, a non-finite statistic on the
            data, or no resample with a finite one.
    """
    _check_level(level, resamples)
    cols = [np.asarray(c, dtype=float) for c in columns]
    if not cols or cols[0].ndim != 1 or cols[0].size == 0 or any(c.shape != cols[0].shape for c in cols):
        raise ValueError(
            f"bootstrap_statistic needs non-empty per-task columns of one length: {[c.shape for c in cols]}"
        )
    point = float(statistic(*cols))
    if not np.isfinite(point):
        raise ValueError(f"the statistic is not finite on the data ({point})")
    rng = np.random.default_rng(seed)
    n = cols[0].size
    draws = np.array([statistic(*(c[idx] for c in cols)) for idx in rng.integers(0, n, size=(resamples, n))])
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        raise ValueError("no resample gave a finite statistic")
    alpha = 1.0 - level
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return Estimate(point, float(low), float(high), n)


def t_interval(per_seed_values: Sequence[float], *, level: float = 0.95) -> Estimate:
    """Mean of a metric measured once per seed (or run) with a Student-t interval,
    mean +- t(n-1) * sd / sqrt(n), sd with ddof=1: for a handful of runs, where there are too few
    values to resample (`bootstrap_ci` is for tasks).

    Raises:
        ValueError: with fewer than 2 values or a level outside (0, 1).
    """
    from scipy.stats import t as student_t  # imported here: scipy.stats takes ~0.3 s to import

    x = np.asarray(per_seed_values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"a t-interval needs at least 2 values, got shape {x.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    half = float(student_t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    mean = float(x.mean())
    return Estimate(mean, mean - half, mean + half, int(x.size))


def wilson_interval(successes: int, trials: int, *, level: float = 0.95) -> Estimate:
    """Share of successes among independent trials with the Wilson score interval
    (statsmodels' `proportion_confint(method="wilson")`); `n` is the number of trials.

    Raises:
        ValueError: with no trials, or successes outside [0, trials].
    """
    from statsmodels.stats.proportion import proportion_confint

    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"a Wilson interval needs trials >= 1 and 0 <= successes <= trials, got {successes}/{trials}")
    low, high = np.asarray(proportion_confint(successes, trials, alpha=1.0 - level, method="wilson"), dtype=float)
    return Estimate(successes / trials, float(low), float(high), int(trials))


def seed_spread(per_seed_means: Sequence[float]) -> SeedSpread:
    """Mean, std (ddof=1), min and max of a metric measured once per seed."""
    x = np.asarray(per_seed_means, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"seed_spread needs a non-empty list of per-seed means, got shape {x.shape}")
    std = float(x.std(ddof=1)) if x.size > 1 else None
    return SeedSpread(float(x.mean()), std, float(x.min()), float(x.max()), int(x.size))


def stability(matrix) -> Stability:
    """Per-task variation over R repeats of the same evaluation.

    Args:
        matrix: tasks x repeats, 0/1 outcomes or scores (R >= 2).
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] < 2:
        raise ValueError(f"stability needs a tasks x repeats matrix with >= 2 repeats, got shape {m.shape}")
    flips = m.max(axis=1) != m.min(axis=1)
    return Stability(
        tasks=int(m.shape[0]),
        repeats=int(m.shape[1]),
        mean_task_variance=float(m.var(axis=1).mean()),
        flip_share=float(flips.mean()),
        repeat_std=float(m.mean(axis=0).std(ddof=1)),
    )


def paraphrase_spread(acc_per_variant: Mapping[str, float] | Sequence[float]) -> ParaphraseSpread:
    """Spread of accuracy across paraphrased variants of the same tasks (>= 2 variants)."""
    values = acc_per_variant.values() if isinstance(acc_per_variant, Mapping) else acc_per_variant
    x = np.asarray(list(values), dtype=float)
    if x.size < 2:
        raise ValueError(f"paraphrase spread needs at least 2 variants, got {x.size}")
    return ParaphraseSpread(float(x.max() - x.min()), float(x.std(ddof=1)), float(x.min()), float(x.max()), int(x.size))


def truncation_rate(flags: Sequence[bool]) -> float:
    """Share of generations that stopped at the token limit instead of finishing."""
    x = np.asarray(flags, dtype=bool)
    if x.size == 0:
        raise ValueError("truncation rate of zero generations")
    return float(x.mean())
