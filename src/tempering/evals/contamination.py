"""Find evaluation tasks inside training data by shared word n-grams, and remove them.

Rule: both sides are normalised to word tokens (`normalize`). A suite task is indexed by
every n-gram (n = 13 by default, as in GPT-3's decontamination) of its text. A task whose
whole text is shorter than n tokens is indexed as ONE gram of its full length, so short
prompts ("What is 12+5?") are still caught when a training row contains them verbatim.
The flip side: a very short task (a word or two) matches any row containing those words,
so keep suites free of near-empty prompts. Training rows shorter than a task's gram cannot
match it (a row holding a fragment of a longer task is not flagged).

What counts as text. Suite side: the task's `prompt`, `text`, or the contents of its
non-system messages (system prompts are shared instructions, not task content, and would
flag every row that reuses them). Training side: every message content (all roles), plus
`prompt`, `text`, `completion`, `response`, `chosen` and `rejected`, ShareGPT
`conversations` and Alpaca `instruction`/`input`/`output` (content parts read as text), or
a row that is a plain JSON string. A row's texts are joined into one token stream.

Privacy: the index stores 64-bit hashes of grams, not suite text, and hits name private
suites only by suite name, task id and counts. A false match would need a hash collision
(about 1 in 2^64 per lookup).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from tempering.data.io import iter_rows

TRAINING_TEXT_FIELDS = ("messages", "prompt", "text", "completion", "response", "chosen", "rejected",
                        "conversations", "instruction", "input", "output")  # + ShareGPT, Alpaca
SUITE_TEXT_FIELDS = ("messages", "prompt", "text")

# Runs of letters/digits, or a single arithmetic operator.
_TOKEN = re.compile(r"[^\W_]+|[+\-*/=<>^%]")
_OPERATORS = frozenset("+-*/=<>^%")


def normalize(text: str) -> list[str]:
    """Word tokens of `text`: NFKC, case-folded, punctuation and whitespace dropped.

    An arithmetic operator (+ - * / = < > ^ %) next to a number is kept as a token of
    its own, because "what is 12+5" and "what is 12-5" are different tasks; "12+5" and
    "12 + 5" give the same tokens. Elsewhere (hyphens, dashes, markdown asterisks) the
    operator characters are dropped like any other punctuation.
    """
    raw = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
    return [tok for i, tok in enumerate(raw) if tok not in _OPERATORS or _next_to_number(raw, i)]


def _next_to_number(tokens: list[str], i: int) -> bool:
    return (i > 0 and tokens[i - 1].isdecimal()) or (i + 1 < len(tokens) and tokens[i + 1].isdecimal())


def _field_texts(value: Any, *, skip_system: bool) -> list[str]:
    """Strings in one field: a string, or a list of messages / strings."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    texts = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            content = item.get("content", item.get("value"))  # ShareGPT turns hold "value"
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
            if isinstance(content, str) and not (skip_system and item.get("role") == "system"):
                texts.append(content)
    return texts


def row_texts(row: Any, fields: Sequence[str] = TRAINING_TEXT_FIELDS, *, skip_system: bool = False) -> list[str]:
    """The texts of one data row that a contamination check reads (see the module doc).

    Raises:
        ValueError: when the row is neither a string nor an object, or has no text.
    """
    if isinstance(row, str):
        return [row]
    if not isinstance(row, dict):
        raise ValueError(f"row is a {type(row).__name__}, not an object or a string")
    texts = [t for key in fields for t in _field_texts(row.get(key), skip_system=skip_system)]
    if not any(t.strip() for t in texts):
        raise ValueError(f"no text to check (expected one of {', '.join(fields)})")
    return texts


def _tokens(texts: Iterable[str]) -> list[str]:
    return [tok for text in texts for tok in normalize(text)]


def _windows(tokens: list[str], length: int) -> Iterator[tuple[str, ...]]:
    for i in range(len(tokens) - length + 1):
        yield tuple(tokens[i : i + length])


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
    """Word n-grams of evaluation tasks, keyed by suite name and task id."""

    def __init__(self, n: int = 13):
        if n < 1:
            raise ValueError(f"n-gram size must be >= 1, got {n}")
        self.n = n
        self._entries: list[_Entry] = []
        self._keys: set[tuple[str, str]] = set()
        self._private: dict[str, bool] = {}
        self._grams: dict[int, list[int]] = {}  # hash(gram) -> entry indices
        self._short_lengths: set[int] = set()

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
            raise ValueError(f"suite {suite!r}: task id {task_id!r} indexed twice")
        if self._private.setdefault(suite, private) != private:
            raise ValueError(f"suite {suite!r} added both as private and as public")
        tokens = _tokens([text] if isinstance(text, str) else text)
        if not tokens:
            raise ValueError(f"suite {suite!r}: task {task_id!r} has no words to index")
        length = min(self.n, len(tokens))
        if length < self.n:
            self._short_lengths.add(length)
        entry = len(self._entries)
        self._entries.append(_Entry(suite, str(task_id), private))
        self._keys.add(key)
        for gram in set(_windows(tokens, length)):
            self._grams.setdefault(hash(gram), []).append(entry)

    def add_tasks(self, suite: str, rows: Iterable[dict], *, private: bool = False) -> int:
        """Index task rows (`id` plus `prompt` / `messages` / `text`); returns how many."""
        count = 0
        for i, row in enumerate(rows, 1):
            if not isinstance(row, dict) or "id" not in row:
                raise ValueError(f"suite {suite!r}: task {i} has no 'id'")
            try:
                texts = row_texts(row, SUITE_TEXT_FIELDS, skip_system=True)
            except ValueError as exc:
                raise ValueError(f"suite {suite!r}: task {row['id']!r}: {exc}") from None
            self.add(suite, row["id"], texts, private=private)
            count += 1
        return count

    def add_file(self, suite: str, path: str | Path, *, private: bool = False) -> int:
        """Index a suite's task file (JSONL / JSON / Parquet); errors name `path:line`."""
        count = 0
        for location, obj, error in iter_rows(path):
            where = f"{path}:{location.split()[-1]}"
            if error is not None:
                raise ValueError(f"{where}: {error}")
            try:
                count += self.add_tasks(suite, [obj], private=private)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        return count

    def matches(self, row: Any) -> tuple[TaskMatch, ...]:
        """Suite tasks found in one training row (empty when clean), in indexing order.

        Raises:
            ValueError: when the row has no text (see `row_texts`).
        """
        tokens = _tokens(row_texts(row))
        counts: Counter[int] = Counter()
        first: dict[int, tuple[str, ...]] = {}
        for length in sorted(self._short_lengths | {self.n}):
            for gram in dict.fromkeys(_windows(tokens, length)):  # distinct, in order
                for entry in self._grams.get(hash(gram), ()):
                    counts[entry] += 1
                    first.setdefault(entry, gram)
        return tuple(self._match(entry, counts[entry], first[entry]) for entry in sorted(counts))

    def _match(self, entry: int, ngrams: int, gram: tuple[str, ...]) -> TaskMatch:
        e = self._entries[entry]
        return TaskMatch(e.suite, e.task_id, ngrams, e.private, None if e.private else " ".join(gram))

    def scan(self, rows: Iterable[Any], *, source: str = "rows") -> list[Hit]:
        """Hits among in-memory rows; a row without `id` is named `source:N` (1-based)."""
        hits = []
        for i, row in enumerate(rows, 1):
            try:
                found = self.matches(row)
            except ValueError as exc:
                raise ValueError(f"{source}:{i}: {exc}") from None
            if found:
                hits.append(Hit(_row_id(row, f"{source}:{i}"), found))
        return hits

    def scan_file(self, path: str | Path) -> list[Hit]:
        """Hits in a data file (JSONL / JSON / Parquet); rows without `id` are `path:line`."""
        return [Hit(row_id, found) for row_id, _, found in _scan_file(self, path) if found]


def _row_id(row: Any, fallback: str) -> str:
    if isinstance(row, dict) and row.get("id") is not None:
        return str(row["id"])
    return fallback


def _scan_file(index: NgramIndex, path: str | Path) -> Iterator[tuple[str, Any, tuple[TaskMatch, ...]]]:
    """(row id, row, matches) for every row of a data file; bad rows raise with path:line."""
    for location, obj, error in iter_rows(path):
        where = f"{path}:{location.split()[-1]}"
        if error is not None:
            raise ValueError(f"{where}: {error}")
        try:
            found = index.matches(obj)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        yield _row_id(obj, where), obj, found


@dataclass
class DecontamReport:
    """What `decontaminate` kept and removed. Ids and counts only, never suite text."""

    kept: int = 0
    removed: int = 0
    removed_ids: list[str] = field(default_factory=list)
    by_suite: dict[str, int] = field(default_factory=dict)  # suite -> rows removed for it
    hits: list[Hit] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "kept": self.kept,
            "removed": self.removed,
            "removed_ids": list(self.removed_ids),
            "by_suite": dict(self.by_suite),
            "hits": [h.to_dict() for h in self.hits],
        }


def decontaminate(index: NgramIndex, in_path: str | Path, out_path: str | Path) -> DecontamReport:
    """Stream `in_path` and write only the rows with no suite match to `out_path` (JSONL).

    The output is written to a temporary file and moved into place at the end, so a
    failure (such as an unreadable row, reported with path:line) leaves no partial file.
    """
    out_path = Path(out_path)
    if out_path.suffix not in (".jsonl", ".ndjson"):
        raise ValueError(f"{out_path}: decontaminated output must be .jsonl")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    report = DecontamReport()
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row_id, obj, found in _scan_file(index, in_path):
                if not found:
                    fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
                    report.kept += 1
                    continue
                report.removed += 1
                report.removed_ids.append(row_id)
                report.hits.append(Hit(row_id, found))
                for suite in dict.fromkeys(m.suite for m in found):
                    report.by_suite[suite] = report.by_suite.get(suite, 0) + 1
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return report
