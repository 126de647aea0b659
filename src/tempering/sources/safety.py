"""`safety:<kind>`: the shipped safety and honesty tasks (`data/safety.py`).

    tasks: {source: "safety:refuse", split: heldout}    # refuse | comply | unknown | known

`split` picks the disjoint split (by template and by item), `n` the most tasks, `seed` their order.
"""

from __future__ import annotations

from tempering.config import TaskSourceSettings
from tempering.data.safety import KINDS, safety_tasks
from tempering.errors import UserError
from tempering.sources.registry import register_source
from tempering.types import Task


@register_source("safety:")
def _safety(s: TaskSourceSettings, kind: str) -> list[Task]:
    if kind not in KINDS:
        raise UserError(f"task source 'safety:{kind}': the kind must be one of {', '.join(KINDS)}")
    return safety_tasks(kind, s.split, s.n, s.seed)
