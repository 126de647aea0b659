"""Arena ranking: Bradley–Terry ratings on the Elo scale with bootstrap confidence intervals.

A vote is (model_a, model_b, outcome) with outcome 1.0 (a won), 0.0 (b won) or 0.5 (tie;
"both bad" counts as a tie, as in Chatbot Arena). Bradley–Terry says
P(a beats b) = 1 / (1 + 10 ** ((R_b - R_a) / 400)); the ratings R are its maximum-likelihood
fit (Newton's method; a tie is half a win each way), centred on 1000. The arena's ranking
adds a weak Gaussian prior (PRIOR) so that a model that won every vote gets a finite rating. Example: a
beats b in 3 of 4 votes -> P = 0.75 -> R_a - R_b = 400 * log10(3) = 190.8, R = 1095.4 / 904.6.

Confidence intervals: the percentile bootstrap over votes (resample the votes with
replacement, refit, take the 2.5% / 97.5% quantiles per model).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

SCALE, BASE = 400.0, 1000.0
PRIOR = 0.1  # the arena's prior on strengths: sd 1/sqrt(0.1) = 3.2 log-odds (550 Elo points)
OUTCOME = {"a": 1.0, "b": 0.0, "tie": 0.5, "both_bad": 0.5}


def bradley_terry(
    votes: Sequence[tuple[str, str, float]], models: Sequence[str], prior: float = 0.0, iterations: int = 50
) -> np.ndarray:
    """Elo-scale ratings (mean 1000) of `models` from (model_a, model_b, outcome) votes.

    Newton's method on the log-likelihood of P(a beats b) = sigmoid(s_a - s_b) (s in natural
    log-odds; a tie is half a win each way) minus `prior` / 2 * |s|^2, a Gaussian prior on the
    strengths that keeps them finite when a model won or lost every vote (0: plain MLE).
    """
    index = {m: i for i, m in enumerate(models)}
    a = np.array([index[v[0]] for v in votes])
    b = np.array([index[v[1]] for v in votes])
    y = np.array([v[2] for v in votes], dtype=float)
    x = np.zeros((len(votes), len(models)))  # (votes, models): +1 for a, -1 for b
    x[np.arange(len(votes)), a] += 1.0
    x[np.arange(len(votes)), b] -= 1.0
    s = np.zeros(len(models))
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ s)))
        grad = x.T @ (y - p) - prior * s
        hess = (x * (p * (1 - p))[:, None]).T @ x + prior * np.eye(len(models))
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]  # singular along all-ones when prior is 0
        s = s + step
        if np.abs(step).max() < 1e-10:
            break
    ratings = s * SCALE / math.log(10)  # natural-log odds -> Elo points
    return ratings - ratings.mean() + BASE


def ranking(
    votes: Sequence[tuple[str, str, float]], rounds: int = 200, seed: int = 0, prior: float = PRIOR
) -> list[dict[str, Any]]:
    """Per model: rating, 95% bootstrap CI, wins / losses / ties; best first."""
    models = sorted({m for a, b, _ in votes for m in (a, b)})
    if not votes or len(models) < 2:
        return []
    ratings = bradley_terry(votes, models, prior)
    rng = np.random.default_rng(seed)
    samples = np.array(
        [
            bradley_terry([votes[i] for i in rng.integers(0, len(votes), len(votes))], models, prior)
            for _ in range(rounds)
        ]
    )
    low, high = np.percentile(samples, [2.5, 97.5], axis=0)
    out = []
    for i, m in enumerate(models):
        wins = sum(1 for a, b, o in votes if (a == m and o == 1.0) or (b == m and o == 0.0))
        ties = sum(1 for a, b, o in votes if m in (a, b) and o == 0.5)
        played = sum(1 for a, b, _ in votes if m in (a, b))
        out.append(
            {
                "model": m,
                "rating": round(float(ratings[i]), 1),
                "ci_low": round(float(low[i]), 1),
                "ci_high": round(float(high[i]), 1),
                "wins": wins,
                "losses": played - wins - ties,
                "ties": ties,
                "votes": played,
            }
        )
    return sorted(out, key=lambda r: -r["rating"])
