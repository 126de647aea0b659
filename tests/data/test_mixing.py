"""Mixing: quotas, caps, replay, epoch-aware walks, interleaving; realised shares within ±1% on 100k rows."""

import random

import numpy as np
import pytest

from tempering.data.mixing import (
    MixSource,
    draw_mix,
    largest_remainder,
    mix_report,
    plan_mix,
    requested_shares,
    row_text,
    walk,
)


def _source(name, n, track="reasoning", weight=1.0, lo=10, hi=200, seed=0, **kw):
    rng = random.Random(f"{seed}:{name}")
    return MixSource(
        name, track, weight, [{"id": f"{name}-{i}"} for i in range(n)], [rng.randint(lo, hi) for _ in range(n)], **kw
    )


def _four():
    return [
        _source("math", 30000, "reasoning", 0.5),
        _source("code", 20000, "code", 0.3, 100, 800),
        _source("safety", 4000, "safety", 0.2, 20, 60, max_epochs=20.0),
        _source("general", 50000, "general", 1.0, 10, 300, replay=True),
    ]


def test_largest_remainder_by_hand():
    # 10 * (0.45, 0.35, 0.2) = 4.5, 3.5, 2 -> floors 4, 3, 2 leave 1 row; the tie of remainders
    # (.5, .5) goes to the first name in sorted order, "a"
    assert largest_remainder(10, {"a": 0.45, "b": 0.35, "c": 0.2}) == {"a": 5, "b": 3, "c": 2}
    assert largest_remainder(7, {"x": 1 / 3, "y": 1 / 3, "z": 1 / 3}) == {"x": 3, "y": 2, "z": 2}


def test_requested_shares_keep_replay_ratio():
    shares = requested_shares(_four(), replay_ratio=0.2)
    # main sources share 0.8 by weight 0.5 : 0.3 : 0.2; replay takes 0.2
    assert shares == pytest.approx({"math": 0.4, "code": 0.24, "safety": 0.16, "general": 0.2})


@pytest.mark.parametrize("by,size", [("rows", 100_000), ("tokens", 11_000_000)])
def test_realised_within_one_percent_on_100k(by, size):
    """Realised shares within ±1% of the requested ones (rows and tokens)."""
    sources = _four()
    plan = plan_mix(sources, size, by, replay_ratio=0.2)
    rows = draw_mix(sources, plan, seed=3)
    report = mix_report(sources, plan, rows)
    assert not report["capped"]
    if by == "rows":
        assert report["rows"] == 100_000
    else:
        assert report["rows"] >= 100_000
        assert abs(report["tokens"] - size) <= 4 * 800  # each source overshoots by under one row
    assert report["max_abs_error"] < 0.01
    for s in report["sources"]:
        assert abs(s["realised"] - s["requested"]) < 0.01, s
    assert report["tracks"]["general"]["realised"] == pytest.approx(0.2, abs=0.01)


def test_every_prefix_keeps_the_shares():
    sources = _four()
    plan = plan_mix(sources, 100_000, "rows", replay_ratio=0.2)
    names = np.array([r.source for r in draw_mix(sources, plan, seed=0)])
    for prefix in (1000, 10_000, 55_555):
        head = names[:prefix]
        for name, share in plan.requested.items():
            assert abs((head == name).sum() - share * prefix) <= 2  # within two rows of the share


def test_cap_moves_share_to_uncapped_sources_and_keeps_replay():
    sources = [
        _source("big", 1000, weight=1.0),
        _source("tiny", 10, "agent", weight=1.0, max_epochs=3.0),
        _source("gen", 500, "general", replay=True),
    ]
    plan = plan_mix(sources, 1000, "rows", replay_ratio=0.25)
    assert plan.quota == {"big": 720, "tiny": 30, "gen": 250}  # tiny capped at 3 x 10 rows
    assert plan.capped == ["tiny"]
    rows = draw_mix(sources, plan)
    report = mix_report(sources, plan, rows)
    assert report["max_abs_error_effective"] == 0.0
    tiny = [r.index for r in rows if r.source == "tiny"]
    assert sorted(tiny) == sorted(list(range(10)) * 3)  # each row exactly 3 times: a whole walk


def test_walk_is_epoch_aware_and_mix_epochs_continue():
    idx = walk(7, seed=1, name="s", start=0, count=21)
    for e in range(3):
        assert sorted(idx[7 * e : 7 * e + 7]) == list(range(7))  # every row once per source epoch
    assert not np.array_equal(idx[:7], idx[7:14])  # a new permutation each epoch
    sources = [_source("a", 100), _source("b", 1000)]
    plan = plan_mix(sources, 100, "rows")
    e0 = {r.index for r in draw_mix(sources, plan, seed=0, epoch=0) if r.source == "b"}
    e1 = {r.index for r in draw_mix(sources, plan, seed=0, epoch=1) if r.source == "b"}
    assert len(e0) == len(e1) == 50 and not e0 & e1  # epoch 1 continues b's walk: no row repeats


def test_same_seed_same_mix_other_seed_other_order():
    sources = _four()
    plan = plan_mix(sources, 5000, "rows", replay_ratio=0.1)
    a = [(r.source, r.index) for r in draw_mix(sources, plan, seed=7)]
    b = [(r.source, r.index) for r in draw_mix(sources, plan, seed=7)]
    c = [(r.source, r.index) for r in draw_mix(sources, plan, seed=8)]
    assert a == b and a != c


def test_bad_sources_are_errors():
    with pytest.raises(ValueError, match="track"):
        MixSource("x", "poetry", 1.0, [{}], [1])
    with pytest.raises(ValueError, match="unique"):
        plan_mix([_source("a", 5), _source("a", 5)], 10)
    with pytest.raises(ValueError, match="besides replay"):
        plan_mix([_source("g", 5, replay=True)], 10, replay_ratio=0.5)


def test_row_text_counts_message_contents():
    row = {
        "messages": [{"role": "user", "content": "two words"}, {"role": "assistant", "content": "three more words"}],
        "meta": {"ignored": "x y z"},
    }
    assert row_text(row).split() == ["two", "words", "three", "more", "words"]
