"""Find evaluation tasks inside training data by shared word n-grams, and remove them, at scale.

Rule. Both sides are normalised to word tokens (`data.textnorm.normalize`: case, whitespace,
line breaks, punctuation and apostrophes do not matter). A suite task is indexed by every
n-gram (n = 13 by default, as in GPT-3's decontamination) of its text. A task whose whole
text is shorter than n tokens is indexed as ONE gram of its full length, so short prompts
("What is 12+5?") are still caught when a training row contains them verbatim. A training
row contains a task when it holds at least `min_coverage` (default 0.5) of the task's
distinct indexed grams anywhere in its text, so a task re-wrapped, re-cased, stripped of
punctuation or embedded in a longer document is found.

Boilerplate. A gram that `boilerplate_tasks` (default 3) or more tasks share (a shared
instruction header, a licence line) is not indexed: it says nothing about which task leaked,
and a row reusing it would otherwise match every task. The words such grams span are cut out
of the task before it is indexed, so a task is indexed by its OWN text only: grams that
straddle its header are dropped too, and a task whose own text is shorter than n is one gram
of its longest own stretch. So the coverage rule holds for a copy of the task without its
header (a leaked problem rarely carries the suite's instruction), short tasks included: a
16-word HumanEval prompt behind the suite's chat instruction is 4 own grams, all in a copy
of the prompt, where the straddling grams made it 4 of 15 (27%, no match). `min_coverage` is the second guard: a
row sharing only a task's opening sentence, or a phrase one task happens to quote, holds too
small a share of that task to count. The flip side, said plainly: a row holding less than
half of a long task (one paragraph of a long passage) is not flagged; lower `min_coverage`
to catch fragments. A very short task (a word or two) matches any row containing those words,
so keep suites free of near-empty prompts.

What counts as text: see `data.textnorm` (suite side: the task's `prompt`, `text` or
non-system messages; training side: every text field and message, all roles).

Scale. The index maps each suite token to a small id (keyed by the token's hash, not its
text) and stores the 64-bit hashes of its grams in one sorted numpy array, so a row costs
one vectorised pass per gram length and one binary search; memory is the index plus one
row, whatever the size of the training data (rows are streamed, Parquet by batch).

Privacy: the index stores hashes of tokens and grams, not suite text, and hits name
private suites only by suite name, task id and counts. A false match would need a hash
collision (about 1 in 2^64 per lookup).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tempering.atomic import AtomicJsonl
from tempering.data.io import RowError
from tempering.data.streams import require_jsonl, stream_rows, where
from tempering.data.textnorm import (
    SUITE_TEXT_FIELDS,
    TRAINING_TEXT_FIELDS,
    gram_hashes,
    normalize,
    row_texts,
    row_tokens,
)
from tempering.errors import UserError

__all__ = [
    "NgramIndex",
    "TaskMatch",
    "Hit",
    "FileScan",
    "DecontamReport",
    "decontaminate",
    "normalize",
    "row_texts",
    "SUITE_TEXT_FIELDS",
    "TRAINING_TEXT_FIELDS",
]


@dataclass(frozen=True)
class TaskMatch:
    """One suite task found in a row: `ngrams` distinct grams of the row belong to it.

    `example` is one matched gram, for public suites only; it is always None for a
    private suite, so nothing of its content leaves the index.
    """

    suite: str
    task_id: str
    ngrams: int
    private: bool
    example: str | None = None


@dataclass(frozen=True)
class Hit:
    """A training row (by its `id`, else `path:line`) that contains suite tasks."""

    row_id: str
    matches: tuple[TaskMatch, ...]

    def to_dict(self) -> dict:
        return {"row_id": self.row_id, "matches": [asdict(m) for m in self.matches]}


@dataclass(frozen=True)
class _Entry:
    suite: str
    task_id: str
    private: bool


class NgramIndex:
    """Word n-grams of evaluation tasks, keyed by suite name and task id (see the module doc).

    Args:
        n: gram length in words.
        boilerplate_tasks: a gram shared by this many tasks or more is boilerplate, not indexed.
        min_coverage: share of a task's distinct indexed grams a row must hold to contain it.
    """

    def __init__(self, n: int = 13, *, boilerplate_tasks: int = 3, min_coverage: float = 0.5):
        if n < 1:
            raise UserError(f"n-gram size must be >= 1, got {n}")
        if boilerplate_tasks < 2:
            raise UserError(
                f"boilerplate_tasks must be >= 2 (a gram of one task is that task), got {boilerplate_tasks}"
            )
        if not 0.0 < min_coverage <= 1.0:
            raise UserError(f"min_coverage must be in (0, 1], got {min_coverage}")
        self.n, self.boilerplate_tasks, self.min_coverage = n, boilerplate_tasks, min_coverage
        self._entries: list[_Entry] = []
        self._keys: set[tuple[str, str]] = set()
        self._private: dict[str, bool] = {}
        self._vocab: dict[int, int] = {}  # hash(token) -> id (0 is "not a suite token")
        self._token_ids: list[np.ndarray] = []  # per entry: its token ids, in order
        self._lengths: set[int] = set()  # gram lengths in the index (built with it)
        self._sorted: np.ndarray | None = None  # gram hashes, sorted (built on first lookup)
        self._owner = np.empty(0, dtype=np.int64)  # entry of each sorted hash
        self._grams_per_entry = np.empty(0, dtype=np.int64)
        self._boilerplate = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def suites(self) -> dict[str, bool]:
        """Suite name -> whether it is private."""
        return dict(self._private)

    def add(self, suite: str, task_id: str, text: str | Sequence[str], *, private: bool = False) -> None:
        """Index one task's text (a string, or several joined in order).

        Raises:
            ValueError: on a repeated (suite, task id), a text with no tokens, or a suite
                added both as private and as public.
        """
        key = (suite, str(task_id))
        if key in self._keys:
            raise UserError(f"suite {suite!r}: task id {task_id!r} indexed twice")
        if self._private.setdefault(suite, private) != private:
            raise UserError(f"suite {suite!r} added both as private and as public")
        tokens = row_tokens([text] if isinstance(text, str) else text)
        if not tokens:
            raise UserError(f"suite {suite!r}: task {task_id!r} has no words to index")
        ids = np.fromiter(
            (self._vocab.setdefault(hash(t), len(self._vocab) + 1) for t in tokens), dtype=np.uint64, count=len(tokens)
        )
        self._entries.append(_Entry(suite, str(task_id), private))
        self._keys.add(key)
        self._token_ids.append(ids)
        self._sorted = None

    def add_tasks(self, suite: str, rows: Iterable[dict], *, private: bool = False) -> int:
        """Index task rows (`id` plus `prompt` / `messages` / `text`); returns how many."""
        count = 0
        for i, row in enumerate(rows, 1):
            if not isinstance(row, dict) or "id" not in row:
                raise UserError(f"suite {suite!r}: task {i} has no 'id'")
            try:
                texts = row_texts(row, SUITE_TEXT_FIELDS, skip_system=True)
            except ValueError as exc:
                raise UserError(f"suite {suite!r}: task {row['id']!r}: {exc}") from None
            self.add(suite, row["id"], texts, private=private)
            count += 1
        return count

    def add_file(self, suite: str, path: str | Path, *, private: bool = False) -> int:
        """Index a suite's task file (JSONL / JSON / Parquet); errors name `path:line`."""
        count = 0
        for location, obj, error in stream_rows(path):
            if error is not None:
                raise UserError(f"{where(path, location)}: {error}")
            try:
                count += self.add_tasks(suite, [obj], private=private)
            except ValueError as exc:
                raise UserError(f"{where(path, location)}: {exc}") from None
        return count

    def _build(self) -> np.ndarray:
        """Find the boilerplate grams, index each task's own grams, sort all hashes once."""
        if self._sorted is not None:
            return self._sorted
        grams = [gram_hashes(ids, min(self.n, len(ids))) for ids in self._token_ids]  # by position
        boilerplate = _shared_grams(grams, self.boilerplate_tasks)
        self._boilerplate = len(boilerplate)
        own = [self._own_grams(ids, g, boilerplate) for ids, g in zip(self._token_ids, grams)]
        self._lengths = {length for _, length in own if length}
        sizes = [len(g) for g, _ in own]
        hashes = np.concatenate([g for g, _ in own]) if own else np.empty(0, dtype=np.uint64)
        owner = np.repeat(np.arange(len(own), dtype=np.int64), sizes)
        order = np.argsort(hashes, kind="stable")
        self._sorted, self._owner = hashes[order], owner[order]
        self._grams_per_entry = np.array(sizes, dtype=np.int64)
        return self._sorted

    def _own_grams(self, ids: np.ndarray, grams: np.ndarray, boilerplate: np.ndarray) -> tuple[np.ndarray, int]:
        """(distinct hashes, gram length) of a task's own text: its tokens with every boilerplate
        gram's span cut out. Grams straddling the cut are not indexed either: they hold
        boilerplate words, so a copy of the task without its shared header would lack them and
        fall below the coverage rule (a short task, mostly such grams, would never match).
        Stretches of n tokens or more give their n-grams; when none is that long, the longest
        stretch is one gram of its own length (the short-task rule)."""
        length = len(ids) - len(grams) + 1
        shared = np.isin(grams, boilerplate)
        if not shared.any():
            return np.unique(grams), length
        depth = np.zeros(len(ids) + 1, dtype=np.int64)  # +1 where a boilerplate span starts, -1 after it
        np.add.at(depth, np.flatnonzero(shared), 1)
        np.add.at(depth, np.flatnonzero(shared) + length, -1)
        free = np.concatenate(([0], (np.cumsum(depth)[:-1] == 0).astype(np.int8), [0]))
        starts, ends = np.flatnonzero(np.diff(free) == 1), np.flatnonzero(np.diff(free) == -1)
        stretches = [(a, b) for a, b in zip(starts.tolist(), ends.tolist()) if b - a >= self.n]
        if stretches:
            return np.unique(np.concatenate([gram_hashes(ids[a:b], self.n) for a, b in stretches])), self.n
        if not len(starts):
            return np.empty(0, dtype=np.uint64), 0
        a, b = max(zip(starts.tolist(), ends.tolist()), key=lambda r: r[1] - r[0])
        return gram_hashes(ids[a:b], b - a), b - a

    @property
    def boilerplate_grams(self) -> int:
        """How many distinct grams were left out as boilerplate."""
        self._build()
        return self._boilerplate

    @property
    def unindexed(self) -> list[tuple[str, str]]:
        """(suite, task id) of tasks made only of boilerplate grams: they can never match."""
        self._build()
        return [(e.suite, e.task_id) for e, g in zip(self._entries, self._grams_per_entry) if g == 0]

    def matches(self, row: Any) -> tuple[TaskMatch, ...]:
        """Suite tasks found in one training row (empty when clean), in indexing order.

        Raises:
            ValueError: when the row has no text (see `row_texts`).
        """
        return self.match_tokens(row_tokens(row_texts(row)))

    def match_tokens(self, tokens: list[str]) -> tuple[TaskMatch, ...]:
        """Suite tasks found in a normalised token stream (see `matches`)."""
        keys = self._build()
        if not len(keys) or not tokens:
            return ()
        get = self._vocab.get
        ids = np.fromiter((get(hash(t), 0) for t in tokens), dtype=np.uint64, count=len(tokens))
        seen: dict[int, set[int]] = {}  # entry -> distinct matched gram hashes
        first: dict[int, str] = {}
        for length in sorted(self._lengths):
            grams = gram_hashes(ids, length)
            pos = np.searchsorted(keys, grams)
            found = np.flatnonzero(keys[np.minimum(pos, len(keys) - 1)] == grams)
            if not len(found):
                continue
            ends = np.searchsorted(keys, grams[found], side="right")
            for window, lo, hi in zip(found.tolist(), pos[found].tolist(), ends.tolist()):
                gram = int(grams[window])
                for entry in self._owner[lo:hi].tolist():
                    seen.setdefault(entry, set()).add(gram)
                    if entry not in first:
                        first[entry] = " ".join(tokens[window : window + length])
        return tuple(
            self._match(e, len(seen[e]), first[e])
            for e in sorted(seen)
            if len(seen[e]) >= self.min_coverage * self._grams_per_entry[e]
        )

    def _match(self, entry: int, ngrams: int, gram: str) -> TaskMatch:
        e = self._entries[entry]
        return TaskMatch(e.suite, e.task_id, ngrams, e.private, None if e.private else gram)

    def scan(self, rows: Iterable[Any], *, source: str = "rows") -> list[Hit]:
        """Hits among in-memory rows; a row without `id` is named `source:N` (1-based)."""
        hits = []
        for i, row in enumerate(rows, 1):
            try:
                found = self.matches(row)
            except ValueError as exc:
                raise UserError(f"{source}:{i}: {exc}") from None
            if found:
                hits.append(Hit(_row_id(row, f"{source}:{i}"), found))
        return hits

    def read_file(self, path: str | Path) -> Iterator[tuple[str, Any, tuple[TaskMatch, ...], RowError | None]]:
        """(location, row, matches, error) for each row of a data file (JSONL / JSON / Parquet).

        The one reader of training files for contamination: rows come from the reader
        training uses (`data.streams.stream_rows`), and a row that cannot be read (bad
        JSON, not UTF-8, no text) is yielded with its `RowError` and no matches instead of
        stopping the scan, so callers quarantine and count it as training does.
        """
        for location, obj, error in stream_rows(path):
            found: tuple[TaskMatch, ...] = ()
            problem = None if error is None else str(error)
            if problem is None:
                try:
                    found = self.matches(obj)
                except ValueError as exc:
                    problem = str(exc)
            yield location, obj, found, None if problem is None else RowError(str(path), location, problem, obj)

    def scan_file(self, path: str | Path) -> FileScan:
        """Hits in a data file; rows without `id` are `path:line`. Unreadable rows are
        quarantined in the result's `errors`, never raised (see `read_file`)."""
        scan = FileScan()
        for location, obj, found, error in self.read_file(path):
            scan.rows += 1
            if error is not None:
                scan.errors.append(error)
            elif found:
                scan.hits.append(Hit(_row_id(obj, where(path, location)), found))
        return scan


@dataclass
class FileScan:
    """What `NgramIndex.scan_file` found in one file: hits, and the rows it could not read."""

    hits: list[Hit] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    rows: int = 0


def _shared_grams(grams: list[np.ndarray], tasks: int) -> np.ndarray:
    """Sorted distinct hashes that occur in `tasks` or more of the per-task gram arrays."""
    if not grams:
        return np.empty(0, dtype=np.uint64)
    values, counts = np.unique(np.concatenate([np.unique(g) for g in grams]), return_counts=True)
    return values[counts >= tasks]


def _row_id(row: Any, fallback: str) -> str:
    if isinstance(row, dict) and row.get("id") is not None:
        return str(row["id"])
    return fallback


@dataclass
class DecontamReport:
    """What `decontaminate` kept and removed. Ids and counts only, never private suite text."""

    rows: int = 0
    kept: int = 0
    removed: int = 0
    quarantined: int = 0
    removed_ids: list[str] = field(default_factory=list)
    by_suite: dict[str, int] = field(default_factory=dict)  # suite -> rows removed for it
    hits: list[Hit] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)  # the quarantined rows
    sha256: str | None = None  # of the written output

    def to_dict(self) -> dict:
        return {
            "rows": self.rows,
            "kept": self.kept,
            "removed": self.removed,
            "quarantined": self.quarantined,
            "removed_ids": list(self.removed_ids),
            "by_suite": dict(self.by_suite),
            "hits": [h.to_dict() for h in self.hits],
            "sha256": self.sha256,
        }


def decontaminate(
    index: NgramIndex,
    in_path: str | Path,
    out_path: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> DecontamReport:
    """Stream `in_path`; write the rows with no suite match to `out_path` (JSONL), if given.

    Rows that cannot be read (bad JSON, no text) are quarantined in `report.errors` with
    `path:line` and reason, and counted; they are not written. The output is written to a
    temporary file, hashed, and moved into place at the end with `<out>.sha256` beside it,
    so a failure leaves no partial file. `progress(rows_so_far)` is called every 10,000 rows.
    Memory: the index plus one row, plus the ids of removed rows.
    """
    report = DecontamReport()
    writer = AtomicJsonl(require_jsonl(out_path), sidecar=True) if out_path is not None else None
    with writer if writer is not None else _NoWriter():
        for location, obj, found, error in index.read_file(in_path):
            report.rows += 1
            if progress is not None and report.rows % 10_000 == 0:
                progress(report.rows)
            if error is not None:
                report.quarantined += 1
                report.errors.append(error)
                continue
            if not found:
                report.kept += 1
                if writer is not None:
                    writer.write(obj)
                continue
            row_id = _row_id(obj, where(in_path, location))
            report.removed += 1
            report.removed_ids.append(row_id)
            report.hits.append(Hit(row_id, found))
            for suite in dict.fromkeys(m.suite for m in found):
                report.by_suite[suite] = report.by_suite.get(suite, 0) + 1
    if writer is not None:
        report.sha256 = writer.sha256
    return report


class _NoWriter:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
