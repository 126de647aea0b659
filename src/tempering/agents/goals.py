"""Goal checks: did the episode leave the world in the wanted state? (Never read from the transcript.)

{"type": "answer", "value": "4181"}                     the submitted answer (numbers compared as numbers)
{"type": "file", "path": "out.csv", "equals": "..."}    a file's content (trailing whitespace ignored)
{"type": "command", "cmd": "python3 test_calc.py",      a program run in the episode's sandbox exits 0;
 "files": {"test_calc.py": "..."}}                        `files` (hidden copies, e.g. the real tests)
                                                          are written first, so edits to them do not help
{"type": "all", "checks": [...]}                        every check passes
"""

from __future__ import annotations

import re
from typing import Any

from tempering.agents.tools import EnvFailure, ToolContext

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def normalise_answer(text: str, numeric: bool) -> str:
    """An answer as compared: for numeric goals the last number in it, commas dropped."""
    if not numeric:
        return text.strip()
    found = _NUMBER.findall(text)
    if not found:
        return ""
    value = found[-1].replace(",", "")
    return value[:-2] if value.endswith(".0") else value


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-?\d+(?:\.\d+)?", text.strip()))


def answer_correct(goal: dict[str, Any], answer: str | None) -> bool:
    if answer is None:
        return False
    want = str(goal["value"]).strip()
    numeric = _is_number(want)
    return normalise_answer(answer, numeric) == normalise_answer(want, numeric)


def check_goal(goal: dict[str, Any], ctx: ToolContext, answer: str | None) -> bool:
    """Whether the final state meets `goal`. Raises EnvFailure when the sandbox fails the check
    itself, and ValueError for an unknown goal type."""
    kind = goal["type"]
    if kind == "answer":
        return answer_correct(goal, answer)
    if kind == "all":
        return all(check_goal(g, ctx, answer) for g in goal["checks"])
    if ctx.session is None:
        raise EnvFailure(f"goal {kind!r} needs a sandbox session")
    if kind == "file":
        data = ctx.session.read_file(goal["path"])
        return data is not None and data.decode("utf-8", "replace").rstrip() == str(goal["equals"]).rstrip()
    if kind == "command":
        result = ctx.session.exec(goal["cmd"], files=goal.get("files") or None, limits=ctx.limits)
        ctx.sandbox_s += result.wall_s
        if result.status == "sandbox_error":
            raise EnvFailure(f"sandbox error in the goal check: {result.error}")
        return result.ok
    raise ValueError(f"unknown goal type {kind!r} (answer, file, command, all)")
