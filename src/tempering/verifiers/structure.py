"""Structure verifiers: format (tags / JSON), tool_call (JSON + schema), composite (weighted parts)."""

from __future__ import annotations

import json
import re
from typing import Any

from tempering.data.toolcalls import load_json, parse_tool_calls
from tempering.errors import UserError
from tempering.types import Reward
from tempering.verifiers.base import register, score_spec, spec_problem
from tempering.verifiers.context import VerifierContext

_JSON_TYPES = {"string": str, "number": (int, float), "integer": int, "boolean": bool, "object": dict, "array": list}
SCHEMA_KEYWORDS = frozenset({"type", "required", "properties", "enum", "description", "title"})
"""The JSON-schema subset `schema_problems` checks (`description` and `title` are notes); the
`format` verifier refuses a schema with any other keyword, which it would not check."""


def schema_problems(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """A small JSON-schema subset: type, required, properties (recursive), enum."""
    problems = []
    kind = schema.get("type")
    if kind and not (
        isinstance(value, _JSON_TYPES[kind]) and not (kind in ("number", "integer") and isinstance(value, bool))
    ):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        problems.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        problems += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += schema_problems(value[key], sub, f"{where}.{key}")
    return problems


def _same(value: Any, listed: Any) -> bool:
    """JSON equality: `true` is not `1` (Python's `True == 1` is), `1` is `1.0`."""
    return value == listed and isinstance(value, bool) == isinstance(listed, bool)


def _check_schema(schema: Any, where: str = "json_schema") -> None:
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a mapping, got {type(schema).__name__}")
    unknown = sorted(set(schema) - SCHEMA_KEYWORDS)
    if unknown:
        raise ValueError(
            f"{where}: {', '.join(unknown)} would not be checked (the format verifier checks "
            f"{', '.join(sorted(SCHEMA_KEYWORDS - {'description', 'title'}))})"
        )
    if "type" in schema and schema["type"] not in _JSON_TYPES:
        raise ValueError(f"{where}.type {schema['type']!r} is not one of {', '.join(_JSON_TYPES)}")
    if not isinstance(schema.get("required", []), list) or not isinstance(schema.get("enum", []), list):
        raise ValueError(f"{where}: required and enum are lists")
    for key, sub in (schema.get("properties") or {}).items():
        _check_schema(sub, f"{where}.properties.{key}")


def _check_format(spec: dict[str, Any]) -> None:
    unknown = sorted(set(spec) - {"type", "tags", "json_schema"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (the format verifier reads tags and json_schema)")
    tags = spec.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ValueError("tags must be a list of tag names")
    if "json_schema" in spec:
        _check_schema(spec["json_schema"])


@register("format", check=_check_format)
def score_format(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """`tags: [think, answer]` must appear as <t>...</t> in order; `json_schema` checks the answer tag (or the text).

    The options and an extraction example: docs/verifiers.md, "`format`"."""
    problems = []
    pos = 0
    for tag in spec.get("tags", []):
        name = re.escape(tag)
        m = re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL).search(completion, pos)
        if not m:
            problems.append(f"missing <{tag}>...</{tag}> (in order)")
            break
        pos = m.end()
    if "json_schema" in spec:
        m = re.search(r"<answer>(.*?)</answer>", completion, re.DOTALL)
        body = m.group(1) if m else completion
        try:
            problems += schema_problems(load_json(body), spec["json_schema"])
        except json.JSONDecodeError as exc:
            problems.append(f"not valid JSON ({exc.msg})")
    ok = not problems
    return Reward(
        value=1.0 if ok else 0.0, components={"format": 1.0 if ok else 0.0}, detail="; ".join(problems) or None
    )


@register("tool_call")
def score_tool_call(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Every call parses and matches `tools: {name: json_schema_of_arguments}`; value = share valid."""
    parsed = parse_tool_calls(completion)
    tools = spec.get("tools", {})
    problems = list(parsed.errors)
    valid = 0
    for call in parsed.calls:
        if call["name"] not in tools:
            problems.append(f"unknown tool {call['name']!r}")
            continue
        found = schema_problems(call["arguments"], tools[call["name"]], f"{call['name']}.arguments")
        problems += found
        valid += not found
    total = len(parsed.calls) + len(parsed.errors)
    if total == 0 and spec.get("required", True):
        problems.append("no tool call")
    value = valid / total if total else (0.0 if spec.get("required", True) else 1.0)
    return Reward(
        value=value,
        components={"valid_calls": float(valid), "invalid_calls": float(total - valid)},
        detail="; ".join(problems) or None,
    )


def _parts_check(spec: dict[str, Any]) -> None:
    parts = spec["parts"]
    if not isinstance(parts, list) or not parts:
        raise UserError("composite verifier 'parts' must be a non-empty list of {name, weight, verifier}")
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or "name" not in part or "verifier" not in part:
            raise UserError(f"composite part {i} needs 'name' and 'verifier'")
        problem = spec_problem(part["verifier"])
        if problem is not None:
            raise UserError(f"part {part['name']!r}: {problem}")


@register("composite", check=_parts_check)
def score_composite(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Weighted parts: `parts: [{name, weight, verifier: {...}}]`; value = sum(weight x part value).

    A part may instead use `per_invalid_call: -0.1` to add that much per invalid tool call.
    Each part is logged as its own component; flags of any part carry over.
    """
    value, components, flags = 0.0, {}, []
    for part in spec["parts"]:
        reward = score_spec(part["verifier"], completion, ctx)
        if "per_invalid_call" in part:
            contrib = part["per_invalid_call"] * reward.components.get("invalid_calls", 0.0)
        else:
            contrib = part.get("weight", 1.0) * reward.value
        components[part["name"]] = contrib
        flags += [f for f in reward.flags if f not in flags]
        value += contrib
    return Reward(value=value, components=components, flags=flags)
