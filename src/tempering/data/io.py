"""Read JSONL / Parquet rows, validate them, and quarantine the bad ones.

Every row either becomes a validated record or a `RowError` naming file, line (JSONL) or
row (Parquet) and the reason. Callers write errors to a quarantine file and count them;
nothing is dropped silently. Blank JSONL lines are not rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from tempering.types import Conversation

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = {"role", "content", "tool_calls", "name", "tool_call_id"}


class RowInvalid(ValueError):
    """One row's problem, in words a user can act on."""


@dataclass
class RowError:
    source: str
    location: str  # "line 7" or "row 7"
    reason: str
    raw: Any = None

    def __str__(self) -> str:
        return f"{self.source}:{self.location.split()[-1]}: {self.reason}"

    def to_json(self) -> dict:
        raw = self.raw if isinstance(self.raw, (str, dict, list)) else repr(self.raw)
        return {"source": self.source, "location": self.location, "reason": self.reason, "raw": raw}


@dataclass
class Record:
    """A validated row with where it came from."""

    value: Any
    source: str
    location: str


@dataclass
class LoadResult:
    """Rows read; `records` passed validation so far, `errors` did not (later checks,
    such as rendering length, move rows from the first to the second)."""

    records: list[Record] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    rows: int = 0

    def reject(self, record: Record, reason: str, raw: Any = None) -> None:
        self.records.remove(record)
        self.errors.append(RowError(record.source, record.location, reason, raw))

    def summary(self) -> dict:
        return {"rows": self.rows, "valid": len(self.records), "quarantined": len(self.errors)}


def iter_rows(path: str | Path) -> Iterator[tuple[str, Any, Exception | None]]:
    """Yield (location, object-or-raw-text, parse error) for each row of a data file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"row {i}", row, None
        return
    if path.suffix == ".json":  # a JSON array of rows, or a single row object
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        for i, row in enumerate(data if isinstance(data, list) else [data], 1):
            yield f"row {i}", row, None
        return
    if path.suffix not in (".jsonl", ".ndjson"):
        raise ValueError(f"{path}: unsupported data format {path.suffix!r} (use .jsonl, .json or .parquet)")
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"line {i}", json.loads(line), None
            except json.JSONDecodeError as exc:
                yield f"line {i}", line.rstrip("\n"), RowInvalid(f"invalid JSON ({exc.msg} at column {exc.colno})")


def _check_tool_calls(i: int, calls: Any) -> None:
    if not isinstance(calls, list):
        raise RowInvalid(f"message {i}: tool_calls must be a list")
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RowInvalid(f"message {i}: tool_calls[{j}] needs a non-empty string 'name'")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                raise RowInvalid(f"message {i}: tool_calls[{j}].arguments is not valid JSON") from None
        if not isinstance(args, dict):
            raise RowInvalid(f"message {i}: tool_calls[{j}].arguments must be an object")


def _check_message(i: int, m: Any) -> None:
    if not isinstance(m, dict):
        raise RowInvalid(f"message {i} is not an object")
    role = m.get("role")
    if role not in ROLES:
        raise RowInvalid(f"message {i}: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    unknown = set(m) - MESSAGE_KEYS
    if unknown:
        raise RowInvalid(f"message {i}: unknown field(s) {sorted(unknown)}")
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise RowInvalid(f"message {i}: only assistant turns may have tool_calls (role {role!r})")
        _check_tool_calls(i, calls)
    content = m.get("content")
    if content is None and not calls:
        raise RowInvalid(f"message {i} ({role}): missing content")
    if content is not None and not isinstance(content, str):
        raise RowInvalid(f"message {i} ({role}): content must be a string, got {type(content).__name__}")
    if isinstance(content, str) and not content.strip() and not calls:
        raise RowInvalid(f"message {i} ({role}): empty content")


def check_conversation(obj: Any) -> Conversation:
    """Validate one row of chat data; raises RowInvalid with the first problem found."""
    if not isinstance(obj, dict):
        raise RowInvalid(f"row is not a JSON object (got {type(obj).__name__})")
    if "messages" not in obj:
        raise RowInvalid("missing 'messages'")
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        raise RowInvalid("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        _check_message(i, m)
    if not any(m["role"] == "assistant" for m in messages):
        raise RowInvalid("no assistant turn (nothing to learn from)")
    first = next(m["role"] for m in messages if m["role"] != "system")
    if first == "assistant":
        raise RowInvalid("the first non-system turn is the assistant's (no prompt before it)")
    try:
        return Conversation.model_validate({"messages": messages})
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise RowInvalid(f"{where}: {e['msg']}") from None


def load_rows(paths: list[str], check: Callable[[Any], Any] = check_conversation) -> LoadResult:
    """Validate every row of every file with `check` (which raises RowInvalid)."""
    result = LoadResult()
    for path in paths:
        for location, obj, error in iter_rows(path):
            result.rows += 1
            try:
                if error is not None:
                    raise error
                result.records.append(Record(check(obj), str(path), location))
            except RowInvalid as exc:
                result.errors.append(RowError(str(path), location, str(exc), obj))
    return result


def write_quarantine(errors: list[RowError], path: str | Path) -> Path:
    """Write bad rows (with file, location and reason) to a JSONL quarantine file (replaced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for err in errors:
            fh.write(json.dumps(err.to_json(), ensure_ascii=False) + "\n")
    return path
