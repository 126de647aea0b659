"""Arena ranking: Bradley–Terry ratings on the Elo scale with bootstrap confidence intervals.

A vote is (model_a, model_b, outcome) with outcome 1.0 (a won), 0.0 (b won) or 0.5 (tie;
"both bad" counts as a tie, as in Chatbot Arena). Bradley–Terry says
P(a beats b) = 1 / (1 + 10 ** ((R_b - R_a) / 400)); the ratings R are its maximum-likelihood
fit (scikit-learn's logistic regression without intercept, one feature per model: +1 for a,
-1 for b; a tie is two half-weight rows, one win each way), centred on 1000. Example: a
beats b in 3 of 4 votes -> P = 0.75 -> R_a - R_b = 400 * log10(3) = 190.8, R = 1095.4 / 904.6.

Confidence intervals: the percentile bootstrap over votes (resample the votes with
replacement, refit, take the 2.5% / 97.5% quantiles per model).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

SCALE, BASE = 400.0, 1000.0
OUTCOME = {"a": 1.0, "b": 0.0, "tie": 0.5, "both_bad": 0.5}


def bradley_terry(votes: Sequence[tuple[str, str, float]], models: Sequence[str]) -> np.ndarray:
    """Elo-scale ratings (mean 1000) of `models` from (model_a, model_b, outcome) votes."""
    from sklearn.linear_model import LogisticRegression

    index = {m: i for i, m in enumerate(models)}
    rows, ys, weights = [], [], []
    for a, b, outcome in votes:
        x = np.zeros(len(models))
        x[index[a]], x[index[b]] = 1.0, -1.0
        for y, w in ((1, outcome), (0, 1.0 - outcome)):
            if w > 0:
                rows.append(x)
                ys.append(y)
                weights.append(w)
    if len(set(ys)) < 2:  # one class only: every vote went one way; the MLE is at infinity
        ys, rows, weights = ys + [1 - ys[0]], rows + [rows[0]], weights + [1e-6]
    fit = LogisticRegression(fit_intercept=False, C=1e6, tol=1e-10, max_iter=1000)  # C large: plain MLE
    fit.fit(np.array(rows), np.array(ys), sample_weight=np.array(weights))
    ratings = fit.coef_[0] * SCALE / math.log(10)  # natural-log odds -> Elo points
    return ratings - ratings.mean() + BASE


def ranking(votes: Sequence[tuple[str, str, float]], rounds: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """Per model: rating, 95% bootstrap CI, wins / losses / ties; best first."""
    models = sorted({m for a, b, _ in votes for m in (a, b)})
    if not votes or len(models) < 2:
        return []
    ratings = bradley_terry(votes, models)
    rng = np.random.default_rng(seed)
    samples = np.array([bradley_terry([votes[i] for i in rng.integers(0, len(votes), len(votes))], models)
                        for _ in range(rounds)])
    low, high = np.percentile(samples, [2.5, 97.5], axis=0)
    out = []
    for i, m in enumerate(models):
        wins = sum(1 for a, b, o in votes if (a == m and o == 1.0) or (b == m and o == 0.0))
        ties = sum(1 for a, b, o in votes if m in (a, b) and o == 0.5)
        played = sum(1 for a, b, _ in votes if m in (a, b))
        out.append({"model": m, "rating": round(float(ratings[i]), 1), "ci_low": round(float(low[i]), 1),
                    "ci_high": round(float(high[i]), 1), "wins": wins, "losses": played - wins - ties, "ties": ties,
                    "votes": played})
    return sorted(out, key=lambda r: -r["rating"])
