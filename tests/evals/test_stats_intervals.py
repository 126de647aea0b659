"""The intervals bench experiments need beyond a mean over tasks: a t-interval over seeds, a Wilson
interval, a stratified paired bootstrap and a bootstrap of any statistic, each against hand values."""

import math

import numpy as np
import pytest

from tempering.evals.stats import bootstrap_statistic, stratified_paired_bootstrap, t_interval, wilson_interval


def test_t_interval_hand_values():
    # mean 2, sd 1 (ddof=1), t(2 df, 0.975) = 4.302653; half = 4.302653 / sqrt(3) = 2.484138
    e = t_interval([1.0, 2.0, 3.0])
    assert (e.mean, e.n) == (2.0, 3)
    assert e.low == pytest.approx(2.0 - 2.484138, abs=1e-6)
    assert e.high == pytest.approx(2.0 + 2.484138, abs=1e-6)
    # 2 values: t(1 df, 0.975) = 12.706205; sd of [0, 1] = 0.707107; half = 12.706205 * 0.5
    e = t_interval([0.0, 1.0])
    assert (e.low, e.high) == (pytest.approx(0.5 - 6.353102, abs=1e-6), pytest.approx(0.5 + 6.353102, abs=1e-6))
    # 90%: t(2 df, 0.95) = 2.919986
    assert t_interval([1.0, 2.0, 3.0], level=0.9).high == pytest.approx(2.0 + 2.919986 / math.sqrt(3), abs=1e-6)


def test_t_interval_refuses_one_value():
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([0.5])


def test_wilson_interval_hand_values():
    # p = 0.3, z = 1.959964: centre (p + z^2/2n) / (1 + z^2/n) = 0.355509,
    # half z * sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n) = 0.247715
    e = wilson_interval(3, 10)
    assert (e.mean, e.n) == (0.3, 10)
    assert (e.low, e.high) == (pytest.approx(0.107791, abs=1e-6), pytest.approx(0.603222, abs=1e-6))
    # 0 of 4: the interval starts at 0 and reaches z^2 / (n + z^2) = 3.841459 / 7.841459
    e = wilson_interval(0, 4)
    assert e.low == pytest.approx(0.0, abs=1e-12)
    assert e.high == pytest.approx(0.489891, abs=1e-6)
    with pytest.raises(ValueError, match="trials >= 1"):
        wilson_interval(0, 0)


def test_stratified_gain_weighs_each_stratum_the_same():
    # x: 3 tasks gaining 0.2 each; y: 5 tasks losing 0.1. Pooled over tasks the gain would be
    # (0.6 - 0.5) / 8 = 0.0125; per stratum it is (0.2 - 0.1) / 2 = 0.05, and with constant gains
    # inside each stratum every resample gives the same.
    a = {"x": [0.0] * 3, "y": [0.5] * 5}
    b = {"x": [0.2] * 3, "y": [0.4] * 5}
    c = stratified_paired_bootstrap(a, b)
    assert c.delta == pytest.approx(0.05)
    assert (c.low, c.high) == (pytest.approx(0.05), pytest.approx(0.05))
    assert c.n == 8 and c.significant


def test_stratified_resamples_tasks_within_their_stratum():
    # x gains [0, 1], y gains [0, 0]: a resample of x has mean 0, 0.5 or 1 (chance 1/4, 1/2, 1/4),
    # so the mean over strata is 0, 0.25 or 0.5: the 2.5% and 97.5% quantiles are 0 and 0.5.
    # Pooled resampling of the 4 tasks would give means like 0.75 too.
    c = stratified_paired_bootstrap({"x": [0.0, 0.0], "y": [0.0, 0.0]}, {"x": [0.0, 1.0], "y": [0.0, 0.0]})
    assert c.delta == pytest.approx(0.25)
    assert (c.low, c.high) == (0.0, 0.5)
    assert not c.significant


def test_stratified_averages_samples_within_a_task_and_checks_strata():
    c = stratified_paired_bootstrap({"x": [[0, 0], [1, 1]]}, {"x": [[1, 0], [1, 1]]})
    assert c.delta == pytest.approx(0.25)  # task means 0, 1 -> 0.5, 1
    with pytest.raises(ValueError, match="same non-empty strata"):
        stratified_paired_bootstrap({"x": [0.0]}, {"y": [0.0]})
    with pytest.raises(ValueError, match="stratum 'x'"):
        stratified_paired_bootstrap({"x": [0.0]}, {"x": [0.0, 1.0]})


def test_bootstrap_statistic_of_a_constant_ratio_is_a_point():
    e = bootstrap_statistic(lambda num, den: num.sum() / den.sum(), [1, 2, 3], [2, 4, 6])
    assert (e.mean, e.low, e.high, e.n) == (0.5, 0.5, 0.5, 3)


def test_bootstrap_statistic_leaves_out_resamples_without_a_denominator():
    # task 0: 1 of 1, task 1: 0 of 0. Resamples holding task 1 twice have 0/0 and are left out;
    # every other resample has ratio 1.
    with np.errstate(invalid="ignore"):
        e = bootstrap_statistic(lambda num, den: num.sum() / den.sum(), [1, 0], [1, 0])
    assert (e.mean, e.low, e.high) == (1.0, 1.0, 1.0)


def test_bootstrap_statistic_resamples_the_columns_jointly():
    # the same tasks in both columns: a joint resample makes their difference 0 every time
    e = bootstrap_statistic(lambda x, y: x.mean() - y.mean(), [0.1, 0.9, 0.4], [0.1, 0.9, 0.4])
    assert (e.low, e.high) == (0.0, 0.0)
    with pytest.raises(ValueError, match="one length"):
        bootstrap_statistic(lambda x, y: 0.0, [1.0], [1.0, 2.0])
