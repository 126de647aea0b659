"""Multi-domain GRPO: a task mixture declared per domain, its sampling schedule and health checks.

    domains:
      - {name: add, tasks: {source: builtin:arithmetic, ops: "+"}}
      - {name: chain_sum, tasks: {source: "reasoning_gym:chain_sum", n: 200}, weight: 2}
    mixture: {sampling: priority, floor: 0.05}
    grpo: {advantage: per_domain}

The schedule and the health checks live in `rollout/domains.py`; docs/multidomain.md.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from tempering.config.base import Strict
from tempering.config.tasks import TaskSourceSettings

DOMAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class DomainSettings(Strict):
    """One domain of a GRPO task mixture: its tasks, its prior weight and optional held-out tasks."""

    name: str
    """The domain's name (letters, digits, `_.-`): its metrics are `domain/<name>/...`, its task ids `<name>/<id>`."""
    tasks: TaskSourceSettings
    """The domain's training tasks (any task source: builtin, reasoning_gym:<dataset>, humaneval, a JSONL file)."""
    weight: float = Field(default=1.0, ge=0)
    """Prior weight of the domain in the mixture (relative; the schedule multiplies it by learnability)."""
    heldout: TaskSourceSettings | None = None
    """The domain's held-out tasks (scored per domain); None: a seeded split of its training tasks."""

    @field_validator("name")
    @classmethod
    def _name_is_a_word(cls, value: str) -> str:
        if DOMAIN_NAME.fullmatch(value) is None:
            raise ValueError(f"domain name {value!r}: expected letters, digits, '_', '.', '-' (a letter first)")
        return value


class HealthSettings(Strict):
    """Environment health: a domain whose verifier fails (errors or timeouts) too often is paused, then retried."""

    max_failure_rate: float = Field(default=0.25, gt=0, lt=1)
    """Pause a domain when this share of its recent verdicts failed (verifier error or timeout)."""
    window: int = Field(default=3, ge=1)
    """Rollout batches of the domain's own verdicts the failure rate is measured over."""
    min_verdicts: int = Field(default=8, ge=1)
    """Verdicts needed in the window before a domain can be paused."""
    pause_batches: int = Field(default=4, ge=1)
    """Rollout batches a paused domain sits out before it is retried (at the floor share)."""


class MixtureSettings(Strict):
    """How rollout batches draw prompts from the domains (`rollout/domains.py: DomainSchedule`)."""

    sampling: Literal["priority", "uniform"] = "priority"
    """priority: weight x learnability (pass rate near 0.5 draws more; mastered and hopeless fewer);
    uniform: the prior weights as given, never adapted."""
    floor: float = Field(default=0.05, ge=0, lt=1)
    """The least share any active domain gets (none starves); the floors of all domains must sum below 1."""
    smoothing: float = Field(default=0.5, gt=0, le=1)
    """Weight of the newest batch in each domain's running pass rate (1: the last batch only)."""
    prior_pass_rate: float = Field(default=0.5, ge=0, le=1)
    """A domain's pass rate before any of its samples is judged."""
    health: HealthSettings = HealthSettings()
    """Pausing domains whose verifier fails (never counted as model failures)."""


def check_domains(domains: list[DomainSettings] | None, mixture: MixtureSettings | None, tasks_set: bool) -> None:
    """One-line reasons a config's domain mixture cannot run (raised as ValueError)."""
    if domains is None:
        if mixture is not None:
            raise ValueError("mixture: does nothing without domains:; declare the domains or drop mixture")
        return
    if not domains:
        raise ValueError("domains: empty; declare at least one domain (or drop domains: and use tasks:)")
    if tasks_set:
        raise ValueError("tasks: does nothing with domains: (each domain has its own tasks); drop one of them")
    names = [d.name for d in domains]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"domains: name {twice[0]!r} is used twice; each domain needs its own name")
    if sum(d.weight for d in domains) <= 0:
        raise ValueError("domains: weights sum to 0, so no domain would ever be drawn; give some domain a weight > 0")
    for i, d in enumerate(domains):
        if d.weight == 0:
            raise ValueError(f"domains[{i}] ({d.name}): weight 0 is never drawn; give it a weight > 0 or drop it")
    floor = (mixture or MixtureSettings()).floor
    if floor * len(domains) >= 1:
        raise ValueError(f"mixture.floor {floor} x {len(domains)} domains >= 1 leaves nothing for the priority")


def domain_plan(domains: list[DomainSettings]) -> list[dict[str, Any]]:
    """The mixture as recorded in a run summary: name, source and prior weight per domain."""
    return [{"name": d.name, "source": d.tasks.source, "weight": d.weight} for d in domains]
