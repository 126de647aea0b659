"""Remove duplicate rows: exact duplicates by a hash of the normalised text, near duplicates by
MinHash LSH (`datasketch`), keeping the first row of each cluster; report the clusters.

Text. A row's text is every text field and message (`data.textnorm.row_texts`), normalised
to word tokens (case, whitespace, line breaks and punctuation do not matter). Two rows are
exact duplicates when their token streams are equal (blake2b-128 of the tokens).

Near duplicates. A row is a set of word shingles (`shingle` consecutive tokens, 5 by
default; a row shorter than that is one shingle). Two rows are near duplicates when the
Jaccard similarity of their shingle sets is at least `threshold`. MinHash LSH proposes the
candidates: the bands are chosen so that a pair exactly at the threshold becomes a candidate
with probability >= 0.999 (r rows per band, b = num_perm // r bands, the largest r that
allows it); each candidate is then checked with the exact Jaccard of the shingle sets, so
the threshold means what it says and LSH only decides how many pairs are compared.

Keep-first. Rows are read in order; a row is dropped when it duplicates a row already
kept, and joins that kept row's cluster (the most similar one when several qualify). Only
kept rows are indexed, so chains (A ~ B ~ C with A !~ C) stay decided by their first row.
Shingles are hashed with CRC-32 (not Python's salted `hash`), and MinHash is seeded, so the
same input and seed give the same output in every process.

Memory: per kept row its shingle hashes (8 bytes each) and its LSH band keys, plus a
16-byte digest per distinct text; rows themselves are streamed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, cast

import numpy as np

from tempering.data.textnorm import gram_hashes, row_texts, row_tokens, stable_token_ids
from tempering.errors import UserError

CANDIDATE_RECALL = 0.999  # P(a pair exactly at the threshold becomes an LSH candidate)
EXAMPLE_CHARS = 160


def lsh_bands(threshold: float, num_perm: int, recall: float = CANDIDATE_RECALL) -> tuple[int, int]:
    """(bands, rows per band) with the most rows per band such that a pair of Jaccard
    `threshold` collides in at least one band with probability >= `recall`."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= recall:
            best = (bands, rows)
    return best


def shingle_set(tokens: list[str], shingle: int) -> np.ndarray:
    """Sorted distinct 64-bit hashes of the row's word shingles; (S,) uint64."""
    ids = stable_token_ids(tokens)
    return np.unique(gram_hashes(ids, min(shingle, len(tokens))))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted distinct hash arrays."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


@dataclass
class Decision:
    """What happened to one row: kept, or a duplicate of an earlier kept row."""

    kind: str  # kept | exact | near
    of: int | None = None  # index (0-based, in reading order) of the kept row it duplicates
    jaccard: float = 1.0


@dataclass
class Cluster:
    """A kept row and the rows dropped as its duplicates."""

    keeper: str
    example: str
    members: list[dict[str, Any]] = field(default_factory=list)  # {"row", "kind", "jaccard", "example"}


class Deduper:
    """Streaming keep-first dedup (see the module doc); feed rows in order with `add`."""

    def __init__(self, threshold: float = 0.8, num_perm: int = 128, shingle: int = 5, seed: int = 1, near: bool = True):
        from datasketch import MinHashLSH

        if not 0.0 < threshold <= 1.0:
            raise UserError(f"threshold must be in (0, 1], got {threshold}")
        if shingle < 1 or num_perm < 2:
            raise UserError(f"shingle must be >= 1 and num_perm >= 2, got {shingle} and {num_perm}")
        self.threshold, self.num_perm, self.shingle, self.seed, self.near = threshold, num_perm, shingle, seed, near
        self.bands = lsh_bands(threshold, num_perm)
        self._lsh = MinHashLSH(num_perm=num_perm, params=self.bands)
        self._exact: dict[bytes, int] = {}
        self._shingles: dict[int, np.ndarray] = {}
        self._permutations: Any = None
        self.rows = 0

    def _minhash(self, shingles: np.ndarray) -> Any:
        from datasketch import MinHash

        # 32-bit inputs, hashed already: MinHash only permutes them (identity hashfunc).
        m = MinHash(
            num_perm=self.num_perm, seed=self.seed, hashfunc=int, permutations=self._permutations, scheme="affine32"
        )
        self._permutations = m.permutations
        m.update_batch(((shingles >> np.uint64(32)) ^ (shingles & np.uint64(0xFFFFFFFF))).tolist())
        return m

    def add(self, tokens: list[str]) -> Decision:
        """Decide one row (its normalised tokens) against the rows kept so far."""
        index = self.rows
        self.rows += 1
        digest = hashlib.blake2b("\x1f".join(tokens).encode(), digest_size=16).digest()
        first = self._exact.get(digest)
        if first is not None:
            return Decision("exact", first)
        decision = self._near(index, tokens) if self.near else Decision("kept")
        self._exact[digest] = index if decision.of is None else decision.of  # an exact copy joins the same keeper
        return decision

    def _near(self, index: int, tokens: list[str]) -> Decision:
        if not tokens:  # punctuation only: nothing to compare but the exact text
            return Decision("kept")
        shingles = shingle_set(tokens, self.shingle)
        minhash = self._minhash(shingles)
        best: Decision | None = None
        for other in sorted(cast("list[int]", self._lsh.query(minhash))):  # the keys inserted are row indices
            sim = jaccard(shingles, self._shingles[other])
            if sim >= self.threshold and (best is None or sim > best.jaccard):
                best = Decision("near", other, sim)
        if best is not None:
            return best
        self._lsh.insert(index, minhash)
        self._shingles[index] = shingles
        return Decision("kept")


@dataclass
class DedupReport:
    """Counts and duplicate clusters of one dedup pass (examples truncated to 160 characters)."""

    rows: int = 0
    kept: int = 0
    exact: int = 0
    near: int = 0
    clusters: dict[int, Cluster] = field(default_factory=dict)  # keeper's index -> cluster
    dropped_ids: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "kept": self.kept,
            "exact_duplicates": self.exact,
            "near_duplicates": self.near,
            "clusters": len(self.clusters),
        }

    def cluster_list(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Clusters, largest first (ties: reading order), as plain dicts."""
        ordered = sorted(self.clusters.items(), key=lambda kv: (-len(kv[1].members), kv[0]))
        return [
            {"keeper": c.keeper, "size": 1 + len(c.members), "example": c.example, "members": c.members}
            for _, c in ordered[:limit]
        ]


def _example(tokens_text: list[str]) -> str:
    text = " ".join(" ".join(tokens_text).split())
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


def dedup_rows(
    rows: Iterable[tuple[str, Any]],
    deduper: Deduper,
    keep: Callable[[Any], None],
    progress: Callable[[int], None] | None = None,
) -> DedupReport:
    """Run `deduper` over `(row id, row)` pairs; `keep(row)` is called for each kept row.

    Raises:
        ValueError: from `row_texts` when a row has no text (the caller quarantines it first).
    """
    report = DedupReport()
    first_seen: dict[int, tuple[str, str]] = {}  # kept row's index -> (row id, example)
    for row_id, row in rows:
        texts = row_texts(row)
        decision = deduper.add(row_tokens(texts))
        index = deduper.rows - 1
        report.rows += 1
        if progress is not None and report.rows % 10_000 == 0:
            progress(report.rows)
        if decision.of is None:  # kept: a duplicate names the kept row it copies
            report.kept += 1
            first_seen[index] = (row_id, _example(texts))
            keep(row)
            continue
        if decision.kind == "exact":
            report.exact += 1
        else:
            report.near += 1
        report.dropped_ids.append(row_id)
        keeper_id, keeper_example = first_seen[decision.of]
        cluster = report.clusters.setdefault(decision.of, Cluster(keeper_id, keeper_example))
        cluster.members.append(
            {"row": row_id, "kind": decision.kind, "jaccard": round(decision.jaccard, 4), "example": _example(texts)}
        )
    return report
