"""bench/experiments/time_to_reward.py's pure parts: marks to targets, the paired ratio of seconds."""

import pytest

from tests.conftest import load_script

ttr = load_script("bench/experiments/time_to_reward.py")


def _round(side: str, seed: int, steps, seconds) -> dict:
    result = {"steps_to_0_5": steps, "seconds_to_0_5": seconds}
    return {"side": side, "round": seed, "seed": seed, "warmup": False, "result": result}


def test_the_crossing_interpolates_between_the_marks_around_the_target():
    points = [
        {"seconds": 0.0, "accuracy": 0.1},
        {"seconds": 100.0, "accuracy": 0.3},
        {"seconds": 200.0, "accuracy": 0.7},
    ]
    assert ttr.crossing(points, 0.5) == pytest.approx(150.0)
    assert ttr.crossing(points, 0.8) is None
    assert ttr.crossing(points, 0.1) == 0.0  # the start is already there


def test_the_ratio_is_trl_seconds_over_temperings_paired_by_seed_and_a_seed_not_reaching_it_is_dropped():
    records = [
        _round("tempering", 0, 10, 50.0),
        _round("trl", 0, 15, 150.0),
        _round("trl", 1, 12, 120.0),
        _round("tempering", 1, 11, 60.0),
        _round("tempering", 2, None, None),
        _round("trl", 2, 20, 100.0),
    ]
    half = ttr.summary(records, up_to=0.5)["0_5"]
    assert half["ratio_seconds"]["ratio_per_round"] == pytest.approx([3.0, 2.0])
    assert half["ratio_seconds"]["dropped_rounds"] == 1
    ours = half["sides"]["tempering"]
    assert ours["seconds"]["reached"] == 2 and ours["seconds"]["runs"] == 3
    assert ours["steps"]["median"] == pytest.approx(10.5)
    assert half["sides"]["trl"]["seconds"]["median"] == pytest.approx(120.0)
    assert "0_7" not in ttr.summary(records, up_to=0.5)  # above --up-to the marks were not all scored
