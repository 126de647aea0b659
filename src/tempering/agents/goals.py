"""Goal checks: did the episode leave the world in the wanted state? (Never read from the transcript.)

{"type": "answer", "value": "4181"}                     the submitted answer (numbers compared as numbers)
{"type": "file", "path": "out.csv", "equals": "..."}    a file's content (trailing whitespace ignored)
{"type": "command", "cmd": "python3 test_calc.py",      a program run in the episode's sandbox exits 0;
 "files": {"test_calc.py": "..."}}                        `files` (hidden copies, e.g. the real tests)
                                                          are written first, so edits to them do not help
{"type": "all", "checks": [...]}                        every check passes
"""

from __future__ import annotations

from typing import Any

from tempering.agents.tools import EnvFailure, ToolContext
from tempering.numbers import as_number, parse_number


def answer_correct(goal: dict[str, Any], answer: str | None) -> bool:
    """A number goal: the answer's last number has the same value (`4181.00` is `4181`, `1/2`
    is `0.5`, as the `numeric` verifier judges); any other goal: the same stripped text."""
    if answer is None:
        return False
    want = str(goal["value"]).strip()
    value = as_number(want)
    if value is None:
        return answer.strip() == want
    return parse_number(answer) == value


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
