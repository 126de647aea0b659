"""Evaluation statistics: exact pass@k, bootstrap coverage, paired-comparison error rates."""

from itertools import combinations

import numpy as np
import pytest

from tempering.evals.stats import (
    bootstrap_ci,
    mean_pass_at_k,
    paired_bootstrap,
    paraphrase_spread,
    pass_at_k,
    seed_spread,
    stability,
    task_means,
    truncation_rate,
)

# Simulation tests use 1000 resamples (the 2.5%/97.5% quantiles are stable there) to stay fast.
SIM_RESAMPLES = 1000


def enumerated_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of k-subsets of n samples (the first c passing) that hold at least one pass."""
    subsets = list(combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_enumeration_over_all_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(enumerated_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_hand_values_and_suite_mean():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(200, 0, 100) == 0.0
    assert pass_at_k(200, 150, 100) == 1.0  # only 50 failures: every 100-subset passes
    assert mean_pass_at_k(4, [1, 0, 4], 2) == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert mean_pass_at_k([4, 2], [1, 1], 1) == pytest.approx((0.25 + 0.5) / 2)


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6), (5.0, 2, 1)])
def test_pass_at_k_rejects_bad_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_task_means_accepts_flat_matrix_and_ragged_scores():
    assert task_means([1, 0, 1]).tolist() == [1.0, 0.0, 1.0]
    assert task_means(np.array([[1, 0], [1, 1]])).tolist() == [0.5, 1.0]
    assert task_means([[1, 0, 0, 1], [1], [0, 0]]).tolist() == [0.5, 1.0, 0.0]
    with pytest.raises(ValueError, match="task 1 has no samples"):
        task_means([[1], []])
    with pytest.raises(ValueError, match="no task scores"):
        task_means([])


def test_bootstrap_ci_of_constant_scores_is_a_point_and_is_reproducible():
    est = bootstrap_ci([0.5] * 20, seed=3)
    assert (est.mean, est.low, est.high, est.n) == (0.5, 0.5, 0.5, 20)
    x = [1, 0, 0, 1, 1, 0, 1, 1]
    assert bootstrap_ci(x, seed=7) == bootstrap_ci(x, seed=7)
    est = bootstrap_ci(x, seed=7)
    assert est.mean == pytest.approx(5 / 8) and est.low < 5 / 8 < est.high
    assert est.to_dict() == {"mean": est.mean, "low": est.low, "high": est.high, "n": 8}


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(2024)
    experiments, tasks, covered = 1000, 100, 0
    for i in range(experiments):
        p = (0.2, 0.5, 0.8)[i % 3]
        outcomes = (rng.random(tasks) < p).astype(float)
        est = bootstrap_ci(outcomes, level=0.95, resamples=SIM_RESAMPLES, seed=i)
        covered += est.low <= p <= est.high
    coverage = covered / experiments
    print(f"bootstrap coverage at 95%: {coverage:.3f}")
    assert 0.925 <= coverage <= 0.975


def test_paired_identical_scores_are_not_a_difference():
    a = [1, 0, 1, 1, 0, 0, 1, 0] * 10
    cmp = paired_bootstrap(a, a, seed=0)
    assert (cmp.delta, cmp.low, cmp.high, cmp.p_value, cmp.significant, cmp.n) == (0.0, 0.0, 0.0, 1.0, False, 80)


def test_paired_real_shift_is_significant():
    base = [0] * 100 + [1] * 100
    cand = [1] * 30 + [0] * 70 + [1] * 100  # 30 tasks fixed, none broken: delta = 30/200
    cmp = paired_bootstrap(base, cand, resamples=2000, seed=0)
    assert cmp.delta == pytest.approx(0.15)
    assert cmp.significant and 0.08 < cmp.low < 0.15 < cmp.high < 0.22
    # No resample can reach delta <= 0 (it would need all 30 fixed tasks left out: 0.85^200).
    assert cmp.p_value == pytest.approx(2 / 2001)
    worse = paired_bootstrap(cand, base, resamples=2000, seed=0)
    assert worse.delta == pytest.approx(-0.15) and worse.significant and worse.high < 0


def test_paired_averages_samples_within_each_task():
    a = [[1, 0], [1, 1], [0, 0, 0, 0]]
    b = [[1, 1], [1, 1], [1, 0, 0, 0]]
    assert paired_bootstrap(a, b).delta == pytest.approx((0.5 + 0.0 + 0.25) / 3)
    with pytest.raises(ValueError, match="same tasks: 3 vs 2"):
        paired_bootstrap(a, b[:2])


def test_paired_false_alarm_rate_under_the_null_is_about_five_percent():
    rng = np.random.default_rng(7)
    sims, tasks, alarms = 1000, 100, 0
    for i in range(sims):
        p = rng.uniform(0.1, 0.9, tasks)  # tasks differ in difficulty; both models are equal
        a = (rng.random(tasks) < p).astype(float)
        b = (rng.random(tasks) < p).astype(float)
        alarms += paired_bootstrap(a, b, resamples=SIM_RESAMPLES, seed=i).significant
    rate = alarms / sims
    print(f"paired false-alarm rate at 95%: {rate:.3f}")
    assert 0.02 <= rate <= 0.075


def test_paired_detects_a_real_fifteen_point_gain_most_of_the_time():
    rng = np.random.default_rng(11)
    sims, tasks, hits = 200, 300, 0
    for i in range(sims):
        p = rng.uniform(0.1, 0.8, tasks)
        a = (rng.random(tasks) < p).astype(float)
        b = (rng.random(tasks) < p + 0.15).astype(float)
        cmp = paired_bootstrap(a, b, resamples=SIM_RESAMPLES, seed=i)
        hits += cmp.significant and cmp.delta > 0
    print(f"paired power for +0.15 on 300 tasks: {hits / sims:.3f}")
    assert hits / sims >= 0.9


def test_seed_spread_hand_values():
    s = seed_spread([0.5, 0.6, 0.7])
    assert (s.mean, s.std, s.min, s.max, s.n) == pytest.approx((0.6, 0.1, 0.5, 0.7, 3))
    one = seed_spread([0.4])
    assert one.std is None and one.mean == 0.4


def test_stability_hand_values():
    m = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 1]]
    s = stability(m)
    # Per-task variances p(1-p): 0, 1/4, 3/16. Repeat means 2/3, 1/3, 2/3, 2/3 -> std 1/6.
    assert s.tasks == 3 and s.repeats == 4
    assert s.mean_task_variance == pytest.approx((0 + 0.25 + 0.1875) / 3)
    assert s.flip_share == pytest.approx(2 / 3)
    assert s.repeat_std == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match=">= 2 repeats"):
        stability([[1], [0]])


def test_paraphrase_spread_and_truncation_rate():
    p = paraphrase_spread({"original": 0.6, "reworded": 0.7, "reordered": 0.8})
    assert (p.spread, p.std, p.min, p.max, p.n) == pytest.approx((0.2, 0.1, 0.6, 0.8, 3))
    assert paraphrase_spread([0.5, 0.5]).spread == 0.0
    with pytest.raises(ValueError, match="at least 2 variants"):
        paraphrase_spread([0.5])
    assert truncation_rate([True, False, False, False]) == 0.25
    with pytest.raises(ValueError, match="zero generations"):
        truncation_rate([])
