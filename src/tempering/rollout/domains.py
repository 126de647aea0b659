"""Multi-domain GRPO: which domain each prompt of a rollout batch comes from, and which domains are healthy.

    schedule = DomainSchedule(domain_tasks, weights, MixtureSettings(), seed=0)
    tasks = schedule.draw(8)              # the next prompts, by the domains' current shares
    events = schedule.observe(index, groups_by_domain)   # pass rates, health; pauses and retries

Shares (`priority_shares`, pure): an active domain gets `floor`, and the rest of the batch is split
in proportion to `weight x learnability`, learnability = 4 p (1 - p) from the domain's running pass
rate p (1 at p = 0.5, 0 for a mastered or a hopeless domain). With `sampling: uniform` learnability
is 1 (the prior weights as given). When no active domain has any learnability left, the weights alone
split the rest.

Slots are dealt by stride scheduling, not coin flips: each domain accrues `n x share` credit per
draw and each slot goes to the domain with the most credit (ties to the earlier domain), so realised
draws follow the shares within one prompt, and the schedule is a function of its state alone.

Health: a domain whose verdicts failed (verifier error or timeout) more than `max_failure_rate` of
its last `window` batches (at least `min_verdicts` verdicts) is paused for `pause_batches` rollout
batches, with a warning naming it, then retried. A failed verdict never enters a pass rate: it is no
model failure (the rollout source also drops its group from the loss).

Everything the schedule knows is in `state_dict()` (JSON; floats round-trip exactly), saved in each
checkpoint, so a run killed and resumed draws what an unbroken one would.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from tempering.config.domains import MixtureSettings
from tempering.errors import UserError
from tempering.types import Task, Trajectory


def learnability(pass_rate: float) -> float:
    """4 p (1 - p): 1 at p = 0.5, 0 at p = 0 (hopeless) and p = 1 (mastered)."""
    return 4.0 * pass_rate * (1.0 - pass_rate)


def priority_shares(
    weights: Sequence[float],
    pass_rates: Sequence[float],
    active: Sequence[bool],
    floor: float,
    priority: bool = True,
) -> list[float]:
    """Each domain's share of the next prompts (summing to 1; 0 for an inactive domain).

    Active domains get `floor` each; the remaining 1 - floor x n_active is split in proportion to
    weight x learnability (priority) or weight (uniform, or when no learnability is left).
    With no active domain at all, every domain is treated as active (all are retried).
    """
    if not any(active):
        active = [True] * len(weights)
    raw = [w * (learnability(p) if priority else 1.0) if a else 0.0 for w, p, a in zip(weights, pass_rates, active)]
    if sum(raw) <= 0:
        raw = [w if a else 0.0 for w, a in zip(weights, active)]
    rest = 1.0 - floor * sum(active)
    return [(floor + rest * r / sum(raw)) if a else 0.0 for r, a in zip(raw, active)]


@dataclass
class DomainState:
    """What the schedule knows of one domain (all of it JSON)."""

    pass_rate: float
    """Running pass rate over judged samples (exponential smoothing per batch)."""
    cursor: int = 0
    """Prompts drawn so far (position in the domain's seeded task order)."""
    credit: float = 0.0
    """Stride-scheduling credit: accrued share minus slots dealt."""
    judged: int = 0
    passed: int = 0
    failed: int = 0
    """Totals: judged samples, passed samples, failed verdicts (verifier error or timeout)."""
    recent: list[list[int]] = field(default_factory=list)
    """(failed, verdicts) of the domain's last `window` batches."""
    paused_until: int | None = None
    """Rollout batch index from which a paused domain is retried; None: active."""
    pauses: int = 0


class DomainSchedule:
    """Draws each rollout batch's prompts from the domains and watches their health."""

    def __init__(
        self,
        domain_tasks: dict[str, list[Task]],
        weights: dict[str, float],
        settings: MixtureSettings,
        seed: int,
    ):
        empty = [name for name, tasks in domain_tasks.items() if not tasks]
        if empty:
            raise UserError(f"domain {empty[0]!r} has no training tasks")
        self.names = list(domain_tasks)
        self.tasks = domain_tasks
        self.weights = [weights[n] for n in self.names]
        self.s = settings
        self.orders = {}
        for name, tasks in domain_tasks.items():
            order = list(range(len(tasks)))
            random.Random(f"{seed}:{name}").shuffle(order)
            self.orders[name] = order
        self.state = {n: DomainState(pass_rate=settings.prior_pass_rate) for n in self.names}
        self.index = 0  # the rollout batch being drawn
        self.domain_of = {t.id: name for name, tasks in domain_tasks.items() for t in tasks}
        """Each task id's domain."""

    # -- shares and draws --------------------------------------------------------------
    def active(self, name: str) -> bool:
        until = self.state[name].paused_until
        return until is None or self.index >= until

    def shares(self) -> dict[str, float]:
        """The current share of each domain (0 while paused)."""
        values = priority_shares(
            self.weights,
            [self.state[n].pass_rate for n in self.names],
            [self.active(n) for n in self.names],
            self.s.floor,
            self.s.sampling == "priority",
        )
        return dict(zip(self.names, values))

    def draw(self, n: int) -> list[Task]:
        """The next `n` prompts, dealt to the domains by their shares (stride scheduling)."""
        shares = self.shares()
        for name in self.names:
            self.state[name].credit += n * shares[name]
        out = []
        for _ in range(n):
            name = max((nm for nm in self.names if shares[nm] > 0), key=lambda nm: self.state[nm].credit)
            st = self.state[name]
            st.credit -= 1.0
            order = self.orders[name]
            out.append(self.tasks[name][order[st.cursor % len(order)]])
            st.cursor += 1
        return out

    # -- what a batch showed -----------------------------------------------------------
    def observe(self, index: int, verdicts: dict[str, list[Trajectory]]) -> list[dict[str, Any]]:
        """Update pass rates and health from one rollout batch's samples by domain (judged ones
        only enter a pass rate); returns the batch's events (paused, retried) and moves to the next."""
        events: list[dict[str, Any]] = []
        for name in self.names:
            st = self.state[name]
            if st.paused_until is not None and index >= st.paused_until:
                st.paused_until = None
                events.append({"event": "domain_retried", "domain": name, "batch": index})
            samples = verdicts.get(name, [])
            if not samples:
                continue
            judged = [t for t in samples if t.scored]
            failed = len(samples) - len(judged)
            passed = sum(t.reward.passed for t in judged)
            st.judged, st.passed, st.failed = st.judged + len(judged), st.passed + passed, st.failed + failed
            if judged:
                st.pass_rate = (1 - self.s.smoothing) * st.pass_rate + self.s.smoothing * passed / len(judged)
            st.recent = (st.recent + [[failed, len(samples)]])[-self.s.health.window :]
            events += self._check_health(name, index)
        self.index = index + 1
        return events

    def _check_health(self, name: str, index: int) -> list[dict[str, Any]]:
        h, st = self.s.health, self.state[name]
        failed, total = sum(f for f, _ in st.recent), sum(t for _, t in st.recent)
        if total < h.min_verdicts or failed / total <= h.max_failure_rate:
            return []
        st.paused_until, st.pauses, st.recent = index + 1 + h.pause_batches, st.pauses + 1, []
        st.credit = 0.0
        return [
            {
                "event": "domain_paused",
                "domain": name,
                "batch": index,
                "failure_rate": failed / total,
                "verdicts": total,
                "retry_at_batch": st.paused_until,
                "warning": f"domain {name!r} paused: its verifier failed {failed} of {total} recent verdicts "
                f"(> {h.max_failure_rate:g}); retried after {h.pause_batches} rollout batches",
            }
        ]

    # -- metrics and checkpoints ---------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """The schedule as per-domain metrics: share, running pass rate, paused, failed verdicts so far."""
        out: dict[str, float] = {}
        for name, share in self.shares().items():
            st = self.state[name]
            out[f"domain/{name}/share"] = share
            out[f"domain/{name}/pass_rate_ema"] = st.pass_rate
            out[f"domain/{name}/paused"] = float(not self.active(name))
            out[f"domain/{name}/failed_verdicts"] = float(st.failed)
        return out

    def summary(self) -> dict[str, dict[str, Any]]:
        return {n: {**asdict(self.state[n]), "share": s} for n, s in self.shares().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "domains": {n: asdict(st) for n, st in self.state.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        known = set(state["domains"])
        if known != set(self.names):
            raise UserError(
                f"the checkpoint's domains {sorted(known)} are not this config's {sorted(self.names)}; "
                "resume with the same domains or start a new run"
            )
        self.index = state["index"]
        self.state = {n: DomainState(**state["domains"][n]) for n in self.names}


def domain_metrics(
    samples: dict[str, list[Trajectory]], groups_kept: dict[str, int], seconds: float
) -> dict[str, float]:
    """Per-domain figures of one rollout batch, `domain/<name>/<figure>`: mean reward and success
    (judged samples only; absent when none was judged), failure rate (verifier errors and timeouts: not the model's), completion
    tokens per sample, groups kept for the loss, and sample cost (the batch's seconds shared by tokens)."""
    total_tokens = sum(len(t.completion_ids) for ts in samples.values() for t in ts) or 1
    out: dict[str, float] = {}
    for name, ts in samples.items():
        judged = [t for t in ts if t.scored]
        tokens = sum(len(t.completion_ids) for t in ts)
        figures = {
            "failure_rate": 1 - len(judged) / len(ts),
            "tokens": tokens / len(ts),
            "samples": float(len(ts)),
            "groups_kept": float(groups_kept.get(name, 0)),
            "sample_cost_s": seconds * tokens / total_tokens / len(ts),
        }
        if judged:  # a domain with no verdict has no reward to report (not a reward of 0)
            figures["reward"] = sum(t.reward.value for t in judged) / len(judged)
            figures["success"] = sum(t.reward.passed for t in judged) / len(judged)
        out.update({f"domain/{name}/{k}": v for k, v in figures.items()})
    return out
