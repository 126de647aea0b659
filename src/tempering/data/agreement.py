"""Annotator agreement over preference pairs, and the agreement that feeds training.

Each vote is one of three labels: the annotator preferred `chosen`, `rejected`, or saw a
`tie`. Over the rows that carry votes:

  per item     `majority`: the label with the most votes (None when two labels tie for most);
               `agreement`: the majority's share of the votes (1.0: unanimous; 3 of 4: 0.75);
               `support`: the share of votes for the row's recorded `chosen`, a tie vote
               counting half (1.0: everyone agrees with the row; 0.0: everyone prefers the
               other side).
  dataset      Krippendorff's alpha (nominal, from the `krippendorff` package, over the
               item x label vote counts, so items may have different numbers of votes) and
               Fleiss' kappa (`statsmodels`). Fleiss' kappa assumes the same number of
               raters per item: it is computed over the items with the most common vote
               count (`kappa_items` says how many).
  per annotator  agreement with the majority of the *other* annotators on the same item
               (leave-one-out, so a panel of three can still outvote one), over the items
               where those others have a majority.

Feeding training (`filter_pairs`): a row is kept when its majority is `chosen` and its
agreement reaches `min_agreement`; a row whose majority is `rejected` is dropped, or with
`flip` kept with its sides swapped; a row whose majority is `tie` or undecided is dropped.
With `weight_by_support` the kept row's loss weight is multiplied by its support (so a
4-to-1 pair counts 0.8 of a unanimous one). Rows without votes are kept unchanged and
counted (`unvoted`): there is nothing to filter them by.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from tempering.errors import UserError

LABELS = ("chosen", "rejected", "tie")


@dataclass
class ItemAgreement:
    """What the votes of one row say."""

    votes: int
    counts: dict[str, int]
    majority: str | None
    agreement: float
    support: float


def item_agreement(votes: Sequence[Any]) -> ItemAgreement | None:
    """Per-item agreement of a row's votes (objects with `.prefers`, or dicts); None without votes."""
    labels = [v["prefers"] if isinstance(v, dict) else v.prefers for v in votes]
    if not labels:
        return None
    counts = Counter(labels)
    top = counts.most_common()
    majority = top[0][0] if len(top) == 1 or top[0][1] > top[1][1] else None
    support = (counts["chosen"] + 0.5 * counts["tie"]) / len(labels)
    return ItemAgreement(len(labels), {k: counts[k] for k in LABELS}, majority, top[0][1] / len(labels), support)


def vote_counts(items: Sequence[Sequence[Any]]) -> np.ndarray:
    """(items, 3) counts of chosen / rejected / tie votes, for items with at least one vote."""
    rows = [[sum(1 for v in votes if _label(v) == lab) for lab in LABELS] for votes in items if votes]
    return np.asarray(rows, dtype=float).reshape(-1, len(LABELS))


def _label(vote: Any) -> str:
    return vote["prefers"] if isinstance(vote, dict) else vote.prefers


def krippendorff_alpha(counts: np.ndarray) -> float:
    """Nominal Krippendorff's alpha from (items, labels) vote counts (nan when undefined:
    fewer than two pairable votes, or only one label ever used)."""
    import krippendorff

    pairable = counts[counts.sum(axis=1) >= 2]
    if pairable.shape[0] == 0 or np.count_nonzero(pairable.sum(axis=0)) < 2:
        return math.nan
    return float(krippendorff.alpha(value_counts=pairable, level_of_measurement="nominal"))


def fleiss_kappa(counts: np.ndarray) -> tuple[float, int]:
    """Fleiss' kappa over the items with the most common vote count (>= 2); (kappa, items used)."""
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

    totals = counts.sum(axis=1).astype(int)
    eligible = totals[totals >= 2]
    if eligible.size == 0:
        return math.nan, 0
    modal = Counter(eligible.tolist()).most_common(1)[0][0]
    table = counts[totals == modal]
    if np.count_nonzero(table.sum(axis=0)) < 2:  # one label only: chance agreement is 1, kappa 0/0
        return math.nan, int(table.shape[0])
    return float(sm_fleiss_kappa(table, method="fleiss")), int(table.shape[0])


def annotator_agreement(items: Sequence[Sequence[Any]]) -> dict[str, dict[str, float]]:
    """Per annotator: items judged, and the share agreeing with the other annotators' majority."""
    hits: Counter = Counter()
    judged: Counter = Counter()
    voted: Counter = Counter()
    for votes in items:
        for i, vote in enumerate(votes):
            name = vote["annotator"] if isinstance(vote, dict) else vote.annotator
            voted[name] += 1
            others = item_agreement([v for j, v in enumerate(votes) if j != i])
            if others is None or others.majority is None:
                continue
            judged[name] += 1
            hits[name] += _label(vote) == others.majority
    return {
        name: {
            "votes": voted[name],
            "judged": judged[name],
            "agreement": hits[name] / judged[name] if judged[name] else math.nan,
        }
        for name in sorted(voted)
    }


@dataclass
class AgreementReport:
    """Dataset-level figures and the per-item results (None for rows without votes)."""

    rows: int
    voted: int
    alpha: float
    kappa: float
    kappa_items: int
    mean_agreement: float
    annotators: dict[str, dict[str, float]]
    items: list[ItemAgreement | None] = field(repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "voted": self.voted,
            "alpha": _json_float(self.alpha),
            "kappa": _json_float(self.kappa),
            "kappa_items": self.kappa_items,
            "mean_agreement": _json_float(self.mean_agreement),
            "annotators": len(self.annotators),
        }


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def agreement_report(votes_per_row: Sequence[Sequence[Any] | None]) -> AgreementReport:
    """Agreement of every row's votes (a row's votes: a list, or None / [] when it has none)."""
    lists = [list(v or []) for v in votes_per_row]
    items = [item_agreement(v) for v in lists]
    counts = vote_counts(lists)
    kappa, kappa_items = fleiss_kappa(counts)
    voted = [i for i in items if i is not None]
    return AgreementReport(
        rows=len(lists),
        voted=len(voted),
        alpha=krippendorff_alpha(counts),
        kappa=kappa,
        kappa_items=kappa_items,
        mean_agreement=float(np.mean([i.agreement for i in voted])) if voted else math.nan,
        annotators=annotator_agreement([v for v in lists if v]),
        items=items,
    )


@dataclass
class FilterResult:
    kept: list[int]
    """Indices of the kept rows, in order."""
    flipped: list[int]
    """Kept rows whose sides are swapped (their majority preferred `rejected`)."""
    dropped: dict[str, int]
    """Why the others went: low_agreement, majority_rejected, majority_tie, no_majority."""
    weights: dict[int, float]
    """Row index -> its new weight factor (support of the kept side), when weighting."""


def filter_pairs(
    items: Sequence[ItemAgreement | None],
    min_agreement: float = 0.0,
    flip: bool = False,
    weight_by_support: bool = False,
) -> FilterResult:
    """Which rows to keep by their votes (see the module docstring)."""
    if not 0.0 <= min_agreement <= 1.0:
        raise UserError(f"min_agreement must be within [0, 1], got {min_agreement}")
    kept, flipped, weights = [], [], {}
    dropped = {"low_agreement": 0, "majority_rejected": 0, "majority_tie": 0, "no_majority": 0}
    for i, item in enumerate(items):
        if item is None:
            kept.append(i)
            continue
        if item.majority is None:
            dropped["no_majority"] += 1
        elif item.majority == "tie":
            dropped["majority_tie"] += 1
        elif item.majority == "rejected" and not flip:
            dropped["majority_rejected"] += 1
        elif item.agreement < min_agreement:
            dropped["low_agreement"] += 1
        else:
            kept.append(i)
            swap = item.majority == "rejected"
            if swap:
                flipped.append(i)
            if weight_by_support:
                weights[i] = 1.0 - item.support if swap else item.support
    return FilterResult(kept, flipped, dropped, weights)


def apply_filter(
    rows: Sequence[dict[str, Any]], result: FilterResult, items: Sequence[ItemAgreement | None]
) -> list[dict[str, Any]]:
    """The kept rows as JSON rows: flipped ones swapped (votes relabelled to match), weights
    multiplied, and the item's agreement recorded under `meta.agreement`."""
    swap_vote = {"chosen": "rejected", "rejected": "chosen", "tie": "tie"}
    flipped = set(result.flipped)
    out = []
    for i in result.kept:
        row = dict(rows[i])
        item = items[i]
        if item is not None:
            if i in flipped:
                row["chosen"], row["rejected"] = row["rejected"], row["chosen"]
                row["votes"] = [{**v, "prefers": swap_vote[v["prefers"]]} for v in row["votes"]]
            row["meta"] = {
                **(row.get("meta") or {}),
                "agreement": {
                    "agreement": round(item.agreement, 6),
                    "support": round(item.support, 6),
                    "votes": item.votes,
                    "flipped": i in flipped,
                },
            }
        if i in result.weights:
            row["weight"] = round(float(row.get("weight", 1.0)) * result.weights[i], 6)
        out.append(row)
    return out
