"""Read JSONL / JSON / Parquet / saved-dataset rows, validate them, and quarantine the bad ones.

Every row either becomes a validated record or a `RowError` naming file, line (JSONL), element
and the line it starts on (a JSON array) or row (Parquet) and the reason (`where`). Callers write errors to a quarantine file and count them;
nothing is dropped silently. Blank JSONL lines are not rows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from tempering.atomic import write_jsonl_atomic
from tempering.data.formats import RowInvalid, to_messages
from tempering.data.images import check_images
from tempering.errors import InputNotFound, UserError
from tempering.types import Conversation

__all__ = ["RowInvalid"]  # re-exported: callers catch it from here

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = {"role", "content", "tool_calls", "name", "tool_call_id", "weight"}
BOM = b"\xef\xbb\xbf"


def where(path: str | Path, location: str) -> str:
    """A row's place for a message: `path:7` for "line 7", `path:12 (element 3)` for an
    element of a JSON array that starts on line 12, `path: row 7` for a Parquet row (which
    has no line); never an element or row number shown as a line number."""
    words = location.split()
    if words[0] == "line":
        return f"{path}:{words[1]}"
    if words[0] == "element" and len(words) == 4:
        return f"{path}:{words[3].rstrip(')')} (element {words[1]})"
    return f"{path}: {location}"


@dataclass
class RowError:
    source: str
    location: str  # "line 7" (JSONL), "element 3 (line 12)" (a JSON array), "row 7" (Parquet, datasets)
    reason: str
    raw: Any = None

    def __str__(self) -> str:
        return f"{where(self.source, self.location)}: {self.reason}"

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


class NoRows(UserError):
    """A data file holds no rows at all: almost always the wrong file, never silently fine."""


def iter_rows(path: str | Path) -> Iterator[tuple[str, Any, Exception | None]]:
    """Yield (location, object-or-raw-text, parse error) for each row of a data file.

    JSONL is read line by line as bytes, so one line that is not UTF-8 (or not JSON) is
    that line's error and the other lines still load; a UTF-8 byte-order mark is skipped.
    A `.json` file holds an array of rows (or one row, or JSON Lines). A directory is a
    Hugging Face dataset saved with `save_to_disk`.
    """
    path = Path(path)
    if path.is_dir():
        yield from _dataset_dir_rows(path)
        return
    if not path.is_file():
        hint = (
            ""
            if path.is_absolute()
            else (
                " (relative paths in a config file resolve against the config's directory; "
                "on the command line and in --set, against the working directory)"
            )
        )
        raise InputNotFound(f"data file not found: {path}{hint}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"row {i}", row, None
        return
    if path.suffix == ".json":
        yield from _json_rows(path)
        return
    if path.suffix not in (".jsonl", ".ndjson"):
        raise UserError(
            f"{path}: unsupported data format {path.suffix!r} "
            "(use .jsonl, .json, .parquet or a saved Hugging Face dataset directory)"
        )
    with path.open("rb") as fh:
        yield from _jsonl_rows(fh)


def _jsonl_rows(lines: Any) -> Iterator[tuple[str, Any, Exception | None]]:
    for i, raw in enumerate(lines, 1):
        if i == 1 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            yield (
                f"line {i}",
                text,
                RowInvalid(
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte "
                    f"{exc.start + 1} of the line); re-encode the file as UTF-8"
                ),
            )
            continue
        if not line.strip():
            continue
        try:
            yield f"line {i}", json.loads(line), None
        except json.JSONDecodeError as exc:
            yield f"line {i}", line.rstrip("\r\n"), RowInvalid(f"invalid JSON ({exc.msg} at column {exc.colno})")


def _json_rows(path: Path) -> Iterator[tuple[str, Any, Exception | None]]:
    """A JSON array of rows or a single row; a `.json` file that is really JSON Lines
    (as Hugging Face's json loader accepts) is read line by line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x}); re-encode the file as UTF-8"
        ) from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and not text.lstrip().startswith("["):
            yield from _jsonl_rows(data.splitlines(keepends=True))
            return
        raise UserError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(rows, list):
        yield "element 1 (line 1)", rows, None
        return
    for i, (row, line) in enumerate(zip(rows, _element_lines(text)), 1):
        yield f"element {i} (line {line})", row, None


def _element_lines(text: str) -> Iterator[int]:
    """The line each element of the (valid) JSON array `text` starts on."""
    decoder, gap = json.JSONDecoder(), re.compile(r"[\s,]*")
    pos, line, counted = text.index("[") + 1, 1, 0
    while True:
        pos = gap.match(text, pos).end()  # type: ignore[union-attr]  (matches the empty string)
        if pos >= len(text) or text[pos] == "]":
            return
        line += text.count("\n", counted, pos)
        counted = pos
        yield line
        _, pos = decoder.raw_decode(text, pos)


def _dataset_dir_rows(path: Path) -> Iterator[tuple[str, Any, Exception | None]]:
    """Rows of a dataset saved with `datasets.save_to_disk`; a DatasetDict gives its
    `train` split (other splits are their own directories: point at one of them)."""
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"{path}: a directory; reading saved Hugging Face datasets needs "
            "the `datasets` package (pip install datasets)"
        ) from None
    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise UserError(
            f"{path}: a directory, but not a Hugging Face dataset saved with "
            "save_to_disk (give a .jsonl, .json or .parquet file, or such a directory)"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise UserError(
                f"{path}: dataset has no 'train' split (splits: {', '.join(map(str, ds))}); "
                f"point at one split's directory, e.g. {path / str(next(iter(ds)))}"
            )
        ds = ds["train"]
    for i, row in enumerate(ds, 1):
        yield f"row {i}", row, None


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
    if "weight" in m:
        if role != "assistant":
            raise RowInvalid(f"message {i} ({role}): only assistant turns have a weight")
        if type(m["weight"]) is not int or m["weight"] not in (0, 1):
            raise RowInvalid(f"message {i}: weight must be 0 or 1, got {m['weight']!r}")
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise RowInvalid(f"message {i}: only assistant turns may have tool_calls (role {role!r})")
        _check_tool_calls(i, calls)
    content = m.get("content")
    if content is None and not calls:
        raise RowInvalid(f"message {i} ({role}): missing content")
    if isinstance(content, list):  # text and image parts (formats.message_content)
        if role == "tool":
            raise RowInvalid(f"message {i} (tool): images in tool results are not supported")
        return
    if content is not None and not isinstance(content, str):
        raise RowInvalid(f"message {i} ({role}): content must be a string, got {type(content).__name__}")
    if isinstance(content, str) and not content.strip() and not calls:
        raise RowInvalid(f"message {i} ({role}): empty content")


def check_conversation(obj: Any) -> Conversation:
    """Validate one row of chat data in any supported format (see `formats.py`).

    Raises:
        RowInvalid: the first problem found; for rows not in `messages` format the reason
            starts with the format the row was read as (its message numbers count the
            normalised conversation).
    """
    fmt, messages = to_messages(obj)
    try:
        return _check_messages(messages)
    except RowInvalid as exc:
        if fmt == "messages":
            raise
        raise RowInvalid(f"{fmt} row: {exc}") from None


def _check_messages(messages: list[dict]) -> Conversation:
    for i, m in enumerate(messages):
        _check_message(i, m)
    if not any(m["role"] == "assistant" for m in messages):
        raise RowInvalid("no assistant turn (nothing to learn from)")
    if all(m.get("weight") == 0 for m in messages if m["role"] == "assistant"):
        raise RowInvalid("every assistant turn has weight 0 (nothing to learn from)")
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
    """Validate every row of every file with `check` (which raises RowInvalid).

    Raises:
        NoRows: a file holds no rows (an empty file is a mistake, not a clean dataset).
    """
    result = LoadResult()
    for path in paths:
        before = result.rows
        for location, obj, error in iter_rows(path):
            result.rows += 1
            try:
                if error is not None:
                    raise error
                result.records.append(Record(_with_images(check(obj), Path(path).parent), str(path), location))
            except RowInvalid as exc:
                result.errors.append(RowError(str(path), location, str(exc), obj))
        if result.rows == before:
            raise NoRows(f"{path}: no rows")
    return result


def _with_images(value: Any, base: Path) -> Any:
    """A conversation's images decoded once (a bad one is the row's error); relative image
    paths made absolute against the data file's folder. Other values pass through."""
    if not isinstance(value, Conversation) or not any(isinstance(m.content, list) for m in value.messages):
        return value
    return Conversation.model_validate({"messages": check_images(value.to_dicts(), base)})


def write_quarantine(errors: list[RowError], path: str | Path) -> Path:
    """Write bad rows (with file, location and reason) to a JSONL quarantine file (replaced)."""
    write_jsonl_atomic(path, (err.to_json() for err in errors), sidecar=False)
    return Path(path)


def quarantine_in_run(errors: list[RowError], run_dir: str | Path, console: Any, what: str = "rows") -> Path | None:
    """A training run's bad rows: written to `run_dir/quarantine.jsonl`, counted and the first
    five shown on `console`. None when there were none."""
    if not errors:
        return None
    path = write_quarantine(errors, Path(run_dir) / "quarantine.jsonl")
    console.print(f"[yellow]{len(errors)} bad {what} quarantined -> {path}[/yellow]")
    for err in errors[:5]:
        console.print(f"  [yellow]{err}[/yellow]")
    return path
