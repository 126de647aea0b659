"""Preference pairs: the row model, its validation, and loading with quarantine.

One row (JSONL / JSON / Parquet / saved dataset, as `io.iter_rows` reads them):

    {"prompt":   str | [messages],      # str: one user turn; list: the conversation so far
     "chosen":   str | [messages],      # str: one assistant turn; list: assistant (+ tool) turns
     "rejected": str | [messages],
     "votes":  [{"annotator": "a1", "prefers": "chosen" | "rejected" | "tie"}],   # optional
     "source": "human" | "verifier" | "reward_model" | "arena",                  # optional
     "weight": 1.0,                                                            # optional, >= 0
     "meta":   {...}}                                                          # optional

A list prompt may hold system, user, assistant and tool turns (tool calls included) and
ends before the answer (its last turn is `user` or `tool`). A list completion starts with
an assistant turn, holds only assistant and tool turns, and ends with an assistant turn.
Messages are checked as SFT messages are (`io.check_conversation` on prompt + completion),
so tool calls, roles and content follow one rule everywhere. Unknown top-level keys are an
error (provenance goes under `meta`). Identical chosen and rejected are *not* an error
here: the data audit counts them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tempering.data.formats import RowInvalid, text_content
from tempering.data.io import LoadResult, check_conversation, load_rows
from tempering.types import Message

PairSource = Literal["human", "verifier", "reward_model", "arena"]
Side = Literal["chosen", "rejected"]
PAIR_KEYS = ("prompt", "chosen", "rejected", "votes", "source", "weight", "meta")


class Vote(BaseModel):
    """One annotator's label for a pair."""

    model_config = ConfigDict(extra="forbid")
    annotator: str = Field(min_length=1)
    """Who voted (any stable id)."""
    prefers: Literal["chosen", "rejected", "tie"]
    """Which side the annotator preferred."""


class PreferencePair(BaseModel):
    """prompt + chosen + rejected (+ votes, source, weight, meta), as in the row contract.

    Fields keep the form they were given (a string or a message list) so a filtered file
    writes back as it came; `prompt_messages()` / `completion_messages(side)` give the
    message lists the renderer needs.
    """

    model_config = ConfigDict(extra="forbid")
    prompt: str | list[Message]
    chosen: str | list[Message]
    rejected: str | list[Message]
    votes: list[Vote] | None = None
    source: PairSource | None = None
    weight: float = Field(default=1.0, ge=0.0)
    """Loss weight of the pair (e.g. from annotator agreement)."""
    meta: dict[str, Any] | None = None

    @field_validator("weight")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def prompt_messages(self) -> list[dict[str, Any]]:
        """The prompt as message dicts (a string prompt is one user turn)."""
        return _as_dicts(self.prompt, "user")

    def completion_messages(self, side: Side) -> list[dict[str, Any]]:
        """The chosen or rejected answer as message dicts (a string is one assistant turn)."""
        return _as_dicts(getattr(self, side), "assistant")

    def conversation(self, side: Side) -> list[dict[str, Any]]:
        """prompt + the chosen or rejected answer: one full conversation."""
        return self.prompt_messages() + self.completion_messages(side)

    def to_row(self) -> dict[str, Any]:
        """The row as JSON-ready data (absent optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


def _as_dicts(value: str | list[Message], role: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [m.model_dump(exclude_none=True) for m in value]


def _plain_messages(value: Any, field: str) -> Any:
    """Content parts joined to text, so `[{"type": "text", ...}]` content loads as SFT does."""
    if not isinstance(value, list):
        return value
    return [
        {**m, "content": text_content(m["content"], f"{field}[{i}]")} if isinstance(m, dict) and "content" in m else m
        for i, m in enumerate(value)
    ]


def _first_error(exc: ValidationError) -> str:
    """One line for the first real problem; for the `str | list` fields, the error of the
    branch the value actually took (pydantic reports every branch of a union)."""
    errors = exc.errors()
    for e in errors:
        loc = list(e["loc"])
        if loc and loc[0] in ("prompt", "chosen", "rejected") and len(loc) > 1:
            if loc[1] == "str":
                continue  # the value is not a string; the list branch says what is wrong
            loc.pop(1)  # the "list[Message]" branch tag
            if len(loc) == 1:
                break
            return f"{'.'.join(map(str, loc))}: {e['msg']}"
        elif not (loc and loc[0] in ("prompt", "chosen", "rejected")):
            where = ".".join(map(str, loc))
            return f"{where}: {e['msg']}" if where else e["msg"]
    field = errors[0]["loc"][0]
    return f"'{field}' must be a string or a list of messages"


def _check_shape(pair: PreferencePair) -> None:
    prompt = pair.prompt_messages()
    if isinstance(pair.prompt, str) and not pair.prompt.strip():
        raise RowInvalid("'prompt' is empty")
    if not prompt:
        raise RowInvalid("'prompt' is an empty list")
    if not any(m["role"] == "user" for m in prompt):
        raise RowInvalid("'prompt' has no user turn")
    if prompt[-1]["role"] not in ("user", "tool"):
        raise RowInvalid(
            f"'prompt' must end before the answer (its last turn is {prompt[-1]['role']!r}; expected 'user' or 'tool')"
        )
    for side in ("chosen", "rejected"):
        value = getattr(pair, side)
        if isinstance(value, str):
            if not value.strip():
                raise RowInvalid(f"'{side}' is empty")
            continue
        if not value:
            raise RowInvalid(f"'{side}' is an empty list")
        roles = [m.role for m in value]
        if roles[0] != "assistant":
            raise RowInvalid(
                f"'{side}' must start with an assistant turn (got {roles[0]!r}); "
                "put the shared conversation before the answer in 'prompt'"
            )
        bad = next((i for i, r in enumerate(roles) if r not in ("assistant", "tool")), None)
        if bad is not None:
            raise RowInvalid(f"'{side}'[{bad}]: role {roles[bad]!r}; an answer holds only assistant and tool turns")
        if roles[-1] != "assistant":
            raise RowInvalid(f"'{side}' must end with an assistant turn (got {roles[-1]!r})")
    annotators = [v.annotator for v in pair.votes or []]
    dup = next((a for a in annotators if annotators.count(a) > 1), None)
    if dup is not None:
        raise RowInvalid(f"votes: annotator {dup!r} voted more than once")


def check_pair(obj: Any) -> PreferencePair:
    """Validate one preference row (see the module docstring).

    Raises:
        RowInvalid: the first problem found, naming the field.
    """
    if not isinstance(obj, dict):
        raise RowInvalid(f"row is not a JSON object (got {type(obj).__name__})")
    row = {k: v for k, v in obj.items() if v is not None}  # Arrow fills missing columns with null
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
    if missing:
        keys = ", ".join(sorted(map(str, row))) or "none"
        raise RowInvalid(
            f"not a preference pair: missing {', '.join(repr(k) for k in missing)} "
            f"(keys: {keys}); expected 'prompt', 'chosen', 'rejected'"
        )
    unknown = sorted(set(map(str, row)) - set(PAIR_KEYS))
    if unknown:
        raise RowInvalid(f"unknown field(s) {unknown}; put provenance under 'meta'")
    for key in ("prompt", "chosen", "rejected"):
        row[key] = _plain_messages(row[key], key)
    try:
        pair = PreferencePair.model_validate(row)
    except ValidationError as exc:
        raise RowInvalid(_first_error(exc)) from None
    _check_shape(pair)
    for side in ("chosen", "rejected"):
        try:  # the SFT message rules (roles, content, tool calls), on prompt + this answer
            check_conversation({"messages": pair.conversation(side)})
        except RowInvalid as exc:
            raise RowInvalid(f"prompt + {side}: {exc}") from None
    return pair


def load_pairs(paths: list[str]) -> LoadResult:
    """Read and validate preference rows from every file; bad rows become `RowError`s.

    `records[i].value` is a `PreferencePair`; write `errors` with `io.write_quarantine`.

    Raises:
        NoRows: a file holds no rows.
        FileNotFoundError / ValueError: a file is missing or unreadable as a whole.
    """
    return load_rows([str(p) for p in paths], check=check_pair)
