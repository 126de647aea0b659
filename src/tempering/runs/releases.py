"""Versioned releases with aliases, rollback and the quality canary, kept in the registry.

A release is one version (1, 2, ...) of a model whose gate passed. Aliases name the
release in use: `production` (what serves) and `candidate` (a canary on trial). Every move
of an alias is a row of `alias_events`; the newest row is the alias's target, and a rollback
goes back to what the alias held before its current release was promoted.

    releases = Releases(registry)
    releases.promote("runs/sft/final", gate=verdict.to_dict())           # -> production
    releases.promote(path, gate=verdict.to_dict(), alias="candidate")     # a canary
    releases.decide(second_verdict.to_dict())  # candidate -> production, or rolled back
    releases.rollback("production")            # the previous production release again

The canary decision. A candidate stays `candidate` until a second gate, run on fresh
samples, shows non-inferiority with a confidence interval: the verdict must pass and hold at
least one passing `non-inferior on <suite-or-track> within <margin>` rule (evals.gate). Then
the candidate becomes `production`; otherwise it is rolled back (the candidate alias returns
to its previous target, production is untouched). A verdict without such a rule has shown
nothing and rolls back too.

Each operation is one registry transaction, so a crash between moving an alias and
recording the move leaves the state as it was before: all of it or nothing.
Verdicts are plain dicts (`evals.gate.GateResult.to_dict()`: `{"passed": bool, "rules":
[{"rule", "passed", "detail"}]}`), so this module needs nothing from the evals layer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import sqlalchemy as sa

from tempering.errors import UserError
from tempering.runs.registry import Registry, inserted_id
from tempering.runs.schema import alias_events, releases

PRODUCTION, CANDIDATE = "production", "candidate"
NON_INFERIORITY = "non-inferior on"
_PROMOTIONS = ("promote", "canary-pass")


class ReleaseError(UserError):
    """A release operation that is refused; the message is one line for the user."""


@dataclass(frozen=True)
class Release:
    """One released version of a model."""

    version: int
    model: str
    model_sha256: str | None
    run_id: str | None
    eval_id: int | None
    gate: dict[str, Any]
    canary_gate: dict[str, Any] | None
    status: str  # the alias it holds (production | candidate), or retired | rolled_back
    created_at: float


@dataclass(frozen=True)
class AliasEvent:
    """One move of an alias: to `release` (None: cleared) from `previous`."""

    alias: str
    release: int | None
    previous: int | None
    action: str  # promote | rollback | canary-pass | canary-fail | clear
    reason: str | None
    at: float


@dataclass(frozen=True)
class CanaryDecision:
    """What the canary decision did with the candidate, and why."""

    promoted: bool
    release: Release
    reason: str


def check_verdict(gate: Any, what: str = "gate") -> dict[str, Any]:
    """`gate` as a verdict dict, or a ReleaseError saying what shape is expected."""
    ok = (
        isinstance(gate, Mapping)
        and isinstance(gate.get("passed"), bool)
        and isinstance(gate.get("rules"), list)
        and all(isinstance(r, Mapping) and "rule" in r and "passed" in r for r in gate["rules"])
    )
    if not ok:
        raise ReleaseError(
            f"{what}: expected a gate verdict {{'passed': bool, 'rules': [{{'rule', 'passed', "
            f"'detail'}}, ...]}} (evals.gate's GateResult.to_dict()), got {str(gate)[:120]}"
        )
    return dict(gate)


def _failed_rules(gate: Mapping[str, Any]) -> str:
    return "; ".join(f"{r['rule']} ({r.get('detail', '')})" for r in gate["rules"] if not r["passed"]) or "no rules"


def shows_non_inferiority(gate: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a canary's gate verdict shows non-inferiority, with the reason in one line."""
    gate = check_verdict(gate, "canary gate")
    rules = [r for r in gate["rules"] if str(r["rule"]).lower().startswith(NON_INFERIORITY)]
    if not rules:
        return False, "the canary gate has no 'non-inferior on <suite-or-track> within <margin>' rule"
    if not gate["passed"]:
        return False, f"canary gate failed: {_failed_rules(gate)}"
    return True, "; ".join(f"{r['rule']}: {r.get('detail', '')}" for r in rules)


class Releases:
    """Releases and aliases stored in `registry` (SQLite or PostgreSQL alike)."""

    def __init__(self, registry: Registry):
        self.registry = registry

    # ------------------------------------------------------------------ changing
    def promote(
        self,
        model: str | Path,
        *,
        gate: Mapping[str, Any] | None = None,
        alias: str = PRODUCTION,
        eval_id: int | None = None,
        reason: str | None = None,
    ) -> Release:
        """Release `model` as a new version and point `alias` at it. Refused unless `gate` passed.

        Without `gate`, the verdict of the model's newest eval recorded with a gate is used
        (`Registry.record_eval`). This checks the verdict's outcome only; that it judged these
        weights on these suites is checked one layer up, in `evals.verdict.promote_judged`,
        the one way the CLI and the pipeline release a model."""
        if gate is None:
            gate, eval_id = self.recorded_verdict(model)
        gate = check_verdict(gate)
        if not gate["passed"]:
            raise ReleaseError(f"{model}: gate did not pass, not released: {_failed_rules(gate)}")
        run_id, model_str, sha = self.registry.identify_model(model)
        with self.registry.transaction() as conn:
            self.registry.lock(conn)
            version = inserted_id(
                conn.execute(
                    sa.insert(releases).values(
                        model=model_str,
                        model_sha256=sha,
                        run_id=run_id,
                        eval_id=eval_id,
                        gate=json.dumps(gate),
                        status=alias,
                        created_at=time.time(),
                    )
                )
            )
            self._move(conn, alias, version, "promote", reason)
        return self.get(version)

    def recorded_verdict(self, model: str | Path) -> tuple[dict[str, Any], int]:
        """(verdict, eval id) of the model's newest eval recorded with a gate verdict."""
        judged = [e for e in self.registry.evals(model=model) if e["gate"] is not None]
        if not judged:
            raise ReleaseError(f"{model}: no gate verdict recorded for it; gate it first or pass the verdict")
        return judged[-1]["gate"], judged[-1]["id"]

    def rollback(self, alias: str = PRODUCTION, reason: str | None = None) -> Release:
        """Point `alias` back at the release it held before its current one was promoted."""
        with self.registry.transaction() as conn:
            self.registry.lock(conn)
            current = self._current(conn, alias)
            if current is None:
                raise ReleaseError(f"no release is {alias!r}: nothing to roll back")
            previous = self._before(conn, alias, current)
            if previous is None:
                raise ReleaseError(f"{alias!r} is v{current}, its first release: nothing to roll back to")
            self._move(conn, alias, previous, "rollback", reason)
        return self.get(previous)

    def decide(
        self, canary_gate: Mapping[str, Any], *, candidate: str = CANDIDATE, target: str = PRODUCTION
    ) -> CanaryDecision:
        """The canary decision: promote the `candidate` release to `target` if `canary_gate`
        shows non-inferiority, else roll the candidate back. One transaction either way."""
        promoted, why = shows_non_inferiority(canary_gate)
        with self.registry.transaction() as conn:
            self.registry.lock(conn)
            version = self._current(conn, candidate)
            if version is None:
                raise ReleaseError(f"no release is {candidate!r}: nothing to decide")
            conn.execute(
                sa.update(releases)
                .where(releases.c.version == version)
                .values(canary_gate=json.dumps(dict(canary_gate)))
            )
            if promoted:
                self._move(conn, candidate, None, "clear", f"v{version} promoted to {target}")
                self._move(conn, target, version, "canary-pass", why)
            else:
                self._move(conn, candidate, self._before(conn, candidate, version), "canary-fail", why)
        return CanaryDecision(promoted, self.get(version), why)

    def _move(self, conn: sa.Connection, alias: str, version: int | None, action: str, reason: str | None) -> None:
        """Point `alias` at `version` (None: clear it): the statuses, then the alias event."""
        previous = self._current(conn, alias)
        if previous is not None and previous != version:
            gone = "rolled_back" if action in ("rollback", "canary-fail") else "retired"
            conn.execute(sa.update(releases).where(releases.c.version == previous).values(status=gone))
        if version is not None:
            conn.execute(sa.update(releases).where(releases.c.version == version).values(status=alias))
        self._record_move(conn, alias, version, previous, action, reason)

    def _record_move(
        self,
        conn: sa.Connection,
        alias: str,
        version: int | None,
        previous: int | None,
        action: str,
        reason: str | None,
    ) -> None:
        conn.execute(
            sa.insert(alias_events).values(
                alias=alias, release=version, previous=previous, action=action, reason=reason, at=time.time()
            )
        )

    # ------------------------------------------------------------------ reading
    @staticmethod
    def _current(conn: sa.Connection, alias: str) -> int | None:
        row = conn.execute(
            sa.select(alias_events.c.release)
            .where(alias_events.c.alias == alias)
            .order_by(alias_events.c.id.desc())
            .limit(1)
        ).first()
        return row.release if row else None

    @staticmethod
    def _before(conn: sa.Connection, alias: str, version: int) -> int | None:
        """What `alias` held before `version` was (last) promoted to it."""
        row = conn.execute(
            sa.select(alias_events.c.previous)
            .where(
                (alias_events.c.alias == alias)
                & (alias_events.c.release == version)
                & alias_events.c.action.in_(_PROMOTIONS)
            )
            .order_by(alias_events.c.id.desc())
            .limit(1)
        ).first()
        return row.previous if row else None

    def current(self, alias: str = PRODUCTION) -> Release | None:
        """The release `alias` points at, or None."""
        with self.registry.reading() as conn:
            version = self._current(conn, alias)
        return self.get(version) if version is not None else None

    def resolve(self, alias: str = PRODUCTION) -> Release:
        """The release `alias` points at; a ReleaseError when it points at nothing."""
        release = self.current(alias)
        if release is None:
            raise ReleaseError(f"no release is {alias!r}")
        return release

    def get(self, version: int) -> Release:
        with self.registry.reading() as conn:
            row = conn.execute(sa.select(releases).where(releases.c.version == version)).first()
        if row is None:
            raise ReleaseError(f"no release v{version}")
        return _release(row)

    def list(self) -> list[Release]:
        """Every release, newest first."""
        with self.registry.reading() as conn:
            return [_release(r) for r in conn.execute(sa.select(releases).order_by(releases.c.version.desc()))]

    def history(self, alias: str | None = None) -> list[AliasEvent]:
        """The moves of `alias` (all aliases when None), oldest first."""
        query = sa.select(alias_events).order_by(alias_events.c.id)
        if alias is not None:
            query = query.where(alias_events.c.alias == alias)
        with self.registry.reading() as conn:
            return [AliasEvent(r.alias, r.release, r.previous, r.action, r.reason, r.at) for r in conn.execute(query)]

    def for_run(self, run_id: str) -> list[Release]:
        """The releases of models a run wrote."""
        with self.registry.reading() as conn:
            rows = conn.execute(sa.select(releases).where(releases.c.run_id == run_id).order_by(releases.c.version))
            return [_release(r) for r in rows]


def _release(row: sa.Row) -> Release:
    m = row._mapping
    return Release(
        m["version"],
        m["model"],
        m["model_sha256"],
        m["run_id"],
        m["eval_id"],
        json.loads(m["gate"]),
        json.loads(m["canary_gate"]) if m["canary_gate"] else None,
        m["status"],
        m["created_at"],
    )
