"""The LR schedule: warmup, then decay that never spends the last step at lr 0."""

import math

import pytest

from tempering.config import OptimSettings
from tempering.train.schedule import lr_at


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_last_step_still_learns(schedule):
    # 10 steps, no warmup, min_lr_ratio 0: the old schedule put step 9 (the last) at exactly 0.
    opt = OptimSettings(lr=1.0, schedule=schedule)
    lrs = [lr_at(s, 10, opt) for s in range(10)]
    assert lrs[0] == 1.0
    assert lrs[-1] > 0
    assert all(a > b for a, b in zip(lrs, lrs[1:]))  # strictly decaying
    # decay spans steps 0..10 (10 would be the first step after training): hand-derived
    expected = 0.5 * (1 + math.cos(math.pi * 9 / 10)) if schedule == "cosine" else 1 - 9 / 10
    assert lrs[-1] == pytest.approx(expected)


def test_warmup_then_cosine_with_floor():
    opt = OptimSettings(lr=2.0, warmup_steps=4, schedule="cosine", min_lr_ratio=0.1)
    assert [lr_at(s, 12, opt) for s in range(4)] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    # step 4 is the peak; step 8 is half-way through the 8-step decay span: cos(pi/2) = 0
    assert lr_at(4, 12, opt) == pytest.approx(2.0)
    assert lr_at(8, 12, opt) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))
    assert lr_at(11, 12, opt) > 2.0 * 0.1
