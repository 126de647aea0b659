"""The written form of tool calls inside an assistant turn, and its parser.

Tempering's documented form, used where a chat template has no tool-call syntax of its
own (SmolLM2's silently drops `tool_calls`), is one line per call appended to the
assistant text:

    <tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>

Tool results go in the following `tool` turn as plain text. Templates that render tool
calls themselves (Qwen2.5/Hermes style) use the same tags with whitespace around the
JSON, so one parser reads both; rendering checks that the parser reads a template's
native form back before trusting it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL_RE = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.DOTALL)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One call in Tempering's form (compact JSON, key order `name`, `arguments`)."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN}{payload}{CLOSE}"


def append_tool_calls(content: str | None, calls: list[dict[str, Any]]) -> str:
    """Assistant text with its calls written after it, one per line."""
    lines = [format_tool_call(c["name"], c.get("arguments", {})) for c in calls]
    head = content or ""
    return "\n".join(([head] if head else []) + lines)


@dataclass
class ParsedToolCalls:
    """What a generated assistant turn says: its text, its calls, and calls that failed to parse."""

    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def load_json(text: str) -> Any:
    """`json.loads`, with nesting too deep to parse reported like any other invalid JSON.

    The decoder recurses once per level, so `[[[[...` a few thousand deep raises
    RecursionError: model text must get a verdict ("invalid JSON"), never a crash.

    Raises:
        json.JSONDecodeError: not JSON, or nested deeper than the interpreter's recursion limit.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


def parse_tool_calls(text: str) -> ParsedToolCalls:
    """Split generated assistant text into plain content and tool calls.

    A block whose body is not a JSON object with a string `name` and an object
    `arguments` is reported in `errors` (never silently dropped), so agents and
    verifiers can penalise it.
    """
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for body in _CALL_RE.findall(text):
        try:
            obj = load_json(body)
        except json.JSONDecodeError as exc:
            errors.append(f"invalid JSON in tool call ({exc.msg}): {body[:200]!r}")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append(f"tool call without a string 'name': {body[:200]!r}")
            continue
        args = obj.get("arguments", {})
        if not isinstance(args, dict):
            errors.append(f"tool call arguments are not an object: {body[:200]!r}")
            continue
        calls.append({"name": obj["name"], "arguments": args})
    content = _CALL_RE.sub("", text).strip()
    if OPEN in content:
        errors.append("unterminated <tool_call> block")
    return ParsedToolCalls(content=content, calls=calls, errors=errors)
