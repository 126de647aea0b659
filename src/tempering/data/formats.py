"""Row formats other than `messages`, normalised to a message list when rows are loaded.

Each row's format is detected from the keys it has (a key holding null, as Arrow fills
missing columns, counts as absent):

    messages            {"messages": [{"role", "content", ...}]}             (OpenAI / TRL)
    prompt/completion   {"prompt": str | messages, "completion": str | messages}   (TRL)
    ShareGPT            {"conversations": [{"from": "human"|"gpt"|..., "value"}], "system"?}
    Alpaca              {"instruction", "input"?, "output", "system"?, "history"?}

A string prompt becomes one user turn and a string completion one assistant turn, so the
chat template renders them and the loss falls on the completion only. Content given as
OpenAI content parts (`[{"type": "text", "text": ...}]`) is joined into one string; content
with `image_url` parts stays a list of text and image parts (vision rows: `images.py` checks
the images, a vision model's processor renders them, a text-only model refuses them). Any
other part (audio, files) is an error.
A row that fits no format, or more than one, is an error naming the keys it has.
Checks on the resulting messages (roles, tool calls, turn order) live in `io.py`.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from tempering.errors import UserError

FORMAT_KEYS: dict[str, frozenset[str]] = {
    "messages": frozenset({"messages"}),
    "prompt/completion": frozenset({"prompt", "completion"}),
    "ShareGPT": frozenset({"conversations"}),
    "Alpaca": frozenset({"instruction", "output"}),
}
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "observation": "tool",
    "function_call": "assistant",
}


class RowInvalid(UserError):
    """One row's problem, in words a user can act on."""


def detect_format(row: Any) -> str:
    """The name of the one format whose keys the row has (see `FORMAT_KEYS`).

    Raises:
        RowInvalid: the row is not an object, or fits no format or several.
    """
    if not isinstance(row, dict):
        raise RowInvalid(f"row is not a JSON object (got {type(row).__name__})")
    present = {k for k, v in row.items() if v is not None}
    fits = [name for name, keys in FORMAT_KEYS.items() if keys <= present]
    keys = ", ".join(sorted(map(str, present))) or "none"
    if len(fits) > 1:
        raise RowInvalid(
            f"ambiguous row: its keys ({keys}) fit the {' and '.join(fits)} formats; keep the columns of one"
        )
    if not fits:
        raise RowInvalid(
            f"unknown row format (keys: {keys}); expected 'messages', 'prompt' + 'completion', "
            "'conversations' (ShareGPT) or 'instruction' + 'output' (Alpaca)"
        )
    return fits[0]


def to_messages(row: Any) -> tuple[str, list[dict]]:
    """(format name, plain message dicts) for one row of any supported format.

    Raises:
        RowInvalid: naming the field at fault.
    """
    fmt = detect_format(row)
    return fmt, _NORMALISERS[fmt](row)


def text_content(content: Any, where: str) -> Any:
    """Content parts joined into one string; any other content is returned as is."""
    if not isinstance(content, list):
        return content
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind != "text":
            raise RowInvalid(
                f"{where}: content part {j} has type {kind!r}; only text parts can be "
                "trained on here (images: in chat rows, for a vision model)"
            )
        if not isinstance(part.get("text"), str):
            raise RowInvalid(f"{where}: content part {j} needs a string 'text'")
        texts.append(part["text"])
    return "".join(texts)


def message_content(content: Any, where: str) -> Any:
    """Chat-row content: text parts joined (as `text_content`), unless an `image_url` part is
    among them; then a list of `{"type": "text", "text"}` and `{"type": "image_url", "image_url"}`
    parts in their order."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
        return text_content(content, where)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            parts.append({"type": "image_url", "image_url": part.get("image_url")})
        else:
            raise RowInvalid(
                f"{where}: content part {j} has type {kind!r}; only text and image_url parts are read"
                if kind != "text"
                else f"{where}: content part {j} needs a string 'text'"
            )
    return parts


def _message_list(value: Any, field: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise RowInvalid(f"'{field}' must be a non-empty list")
    out = []
    for i, m in enumerate(value):
        if isinstance(m, dict) and "content" in m:
            m = {**m, "content": message_content(m["content"], f"{field}[{i}]")}
        out.append(m)
    return out


def _from_messages(row: dict) -> list[dict]:
    return _message_list(row["messages"], "messages")


def _from_prompt_completion(row: dict) -> list[dict]:
    def side(field: str, role: str) -> list[dict]:
        value = row[field]
        if isinstance(value, str):
            return [{"role": role, "content": value}]
        if isinstance(value, list):
            return _message_list(value, field)
        raise RowInvalid(f"'{field}' must be a string or a list of messages, got {type(value).__name__}")

    return side("prompt", "user") + side("completion", "assistant")


def _from_sharegpt(row: dict) -> list[dict]:
    turns = row["conversations"]
    if not isinstance(turns, list) or not turns:
        raise RowInvalid("'conversations' must be a non-empty list")
    out = []
    if isinstance(row.get("system"), str) and row["system"].strip():
        out.append({"role": "system", "content": row["system"]})
    for i, turn in enumerate(turns):
        if isinstance(turn, dict) and "from" not in turn and "role" in turn:
            out.extend(_message_list([turn], f"conversations[{i}]"))  # OpenAI keys under this name
            continue
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise RowInvalid(f"conversations[{i}] needs 'from' and a string 'value'")
        sender = turn.get("from")
        role = SHAREGPT_ROLES.get(sender) if isinstance(sender, str) else None  # a list is unhashable
        if role is None:
            raise RowInvalid(
                f"conversations[{i}]: unknown 'from' {turn.get('from')!r} "
                "(expected human, gpt, system, tool, function_call or observation)"
            )
        if turn["from"] == "function_call":
            out.append({"role": "assistant", "content": None, "tool_calls": _calls(turn["value"], i)})
        else:
            out.append({"role": role, "content": turn["value"]})
    return out


def _calls(value: str, i: int) -> list[dict]:
    """A ShareGPT function_call value: one call object or a list of them, as JSON."""
    try:
        calls = json.loads(value)
    except json.JSONDecodeError as exc:
        raise RowInvalid(f"conversations[{i}] (function_call): value is not JSON ({exc.msg})") from None
    return calls if isinstance(calls, list) else [calls]


def _from_alpaca(row: dict) -> list[dict]:
    for key in ("instruction", "output", "input", "system"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise RowInvalid(f"'{key}' must be a string, got {type(row[key]).__name__}")
    out = []
    if (row.get("system") or "").strip():
        out.append({"role": "system", "content": row["system"]})
    for j, pair in enumerate(row.get("history") or []):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise RowInvalid(f"history[{j}] must be a [instruction, response] pair of strings")
        out += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    # instruction and input joined by a newline, as LLaMA-Factory does
    prompt = "\n".join(x for x in (row["instruction"], row.get("input")) if x)
    return out + [{"role": "user", "content": prompt}, {"role": "assistant", "content": row["output"]}]


_NORMALISERS: dict[str, Callable[[dict], list[dict]]] = {
    "messages": _from_messages,
    "prompt/completion": _from_prompt_completion,
    "ShareGPT": _from_sharegpt,
    "Alpaca": _from_alpaca,
}
