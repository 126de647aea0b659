"""Arena ranking and export, with numbers derived by hand."""

from __future__ import annotations

import math

import pytest

from tempering.serve.arena import arena_pairs, arena_ranking
from tempering.serve.ranking import bradley_terry, ranking


def test_three_wins_in_four_is_400_log10_3_apart():
    # P(a beats b) = 3/4 -> odds 3 -> R_a - R_b = 400 log10 3 = 190.85, centred on 1000
    r = bradley_terry([("a", "b", 1.0)] * 3 + [("a", "b", 0.0)], ["a", "b"])
    assert r[0] - r[1] == pytest.approx(400 * math.log10(3), abs=0.1)
    assert r.mean() == pytest.approx(1000)


def test_ties_count_half_a_win_each_way():
    # 2 wins, 1 loss, 2 ties -> 3 of 5 -> odds 1.5 -> 400 log10 1.5 = 70.44
    votes = [("a", "b", 1.0)] * 2 + [("b", "a", 1.0)] + [("a", "b", 0.5)] * 2
    r = bradley_terry(votes, ["a", "b"])
    assert r[0] - r[1] == pytest.approx(400 * math.log10(1.5), abs=0.1)


def test_ranking_has_bootstrap_cis_and_counts():
    votes = [("v1", "v2", 1.0)] * 6 + [("v1", "v2", 0.0)] * 2 + [("v2", "v1", 0.5)]
    rows = ranking(votes, rounds=100, seed=0)
    assert [r["model"] for r in rows] == ["v1", "v2"]
    top = rows[0]
    assert (top["wins"], top["losses"], top["ties"], top["votes"]) == (6, 2, 1, 9)
    assert top["ci_low"] <= top["rating"] <= top["ci_high"] and top["ci_low"] < top["ci_high"]
    assert ranking(votes, rounds=100, seed=0) == rows  # seeded


def _vote(battle, annotator, choice):
    return {
        "battle_id": battle,
        "annotator": annotator,
        "choice": choice,
        "prompt": "2+2?",
        "model_a": "v2",
        "model_b": "v1",
        "answer_a": "4",
        "answer_b": "5",
    }


def test_votes_become_pairs_with_votes():
    votes = [
        _vote("b1", "ann1", "a"),
        _vote("b1", "ann2", "a"),
        _vote("b1", "ann3", "b"),
        _vote("b2", "ann1", "b"),
        _vote("b2", "ann2", "both_bad"),
        _vote("b3", "ann1", "tie"),
    ]
    pairs, skipped = arena_pairs(votes)
    assert skipped == 1  # b3: a tie only
    first, second = pairs
    assert (first["chosen"], first["rejected"], first["meta"]["chosen_model"]) == ("4", "5", "v2")
    assert [v["prefers"] for v in first["votes"]] == ["chosen", "chosen", "rejected"]
    assert (second["chosen"], second["rejected"]) == ("5", "4")
    assert [v["prefers"] for v in second["votes"]] == ["chosen", "tie"]
    from tempering.data.preference import PreferencePair

    for p in pairs:  # the preference row contract the feedback stage and DPO read
        PreferencePair.model_validate(p)


def test_agreement_of_annotators():
    votes = [_vote("b1", "ann1", "a"), _vote("b1", "ann2", "a"), _vote("b2", "ann1", "b"), _vote("b2", "ann2", "a")]
    report = arena_ranking(votes)
    # b1 unanimous (1.0), b2 split 1:1 (0.5) -> mean agreement 0.75
    assert report["agreement"]["mean_agreement"] == pytest.approx(0.75)
    assert report["battles"] == 2 and report["votes"] == 4
