"""The verifier registry and the one scoring entry point."""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from tempering.errors import UserError
from tempering.types import Reward, Task
from tempering.verifiers.context import VerifierContext
from tempering.verifiers.errors import VerifierError as VerifierError  # re-exported: callers import it from here

ScoreFn = Callable[[dict[str, Any], str, VerifierContext], Reward]
SpecCheck = Callable[[dict[str, Any]], None]
VERIFIERS: dict[str, ScoreFn] = {}
CHECKS: dict[str, SpecCheck] = {}
"""Verifier type -> a check of a spec alone (no completion, no sandbox) that raises
ValueError or KeyError when no completion could be scored against it: run on every task
before generation (`spec_problem`)."""
PROMPTED: set[str] = set()
"""Verifier types that judge the answer *in context*: `score` gives their spec the task's
conversation as `prompt` (a reward model scores prompt + answer, not the answer alone)."""
BOUNDED: dict[str, float] = {}
"""Verifier types scored in a worker process under a deadline (type -> default seconds; a
spec's `timeout_s` overrides it): see `tempering.verifiers.bounded`."""


class UnknownVerifier(KeyError):
    pass


def register(
    name: str, needs_prompt: bool = False, deadline_s: float | None = None, check: SpecCheck | None = None
) -> Callable[[ScoreFn], ScoreFn]:
    """Register `fn(spec, completion, ctx) -> Reward` as the verifier `type: name` (a name taken
    by another function is refused: UserError).

    `needs_prompt`: `score` adds the task's conversation to the spec as `prompt` (unless
    the spec sets one), also inside composite parts.
    `deadline_s`: the verifier runs library code whose cost the completion can choose, so it
    is scored in a worker process killed past this many seconds (`ctx.workers()`); `fn`
    then gets `ctx=None` and must not execute the completion (that needs the sandbox).
    `check(spec)`: raises ValueError/KeyError for a spec no completion could be scored against
    (a missing answer, a regex that does not compile); tasks are checked before any generation.
    """

    def add(fn: ScoreFn) -> ScoreFn:
        known = VERIFIERS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (fn.__module__, fn.__qualname__):
            # a plug-in cannot replace a built-in (or another plug-in's) judge behind its name
            raise UserError(f"verifier {name!r} is already registered (to {known.__module__}.{known.__qualname__})")
        VERIFIERS[name] = fn
        if check is not None:
            CHECKS[name] = check
        if needs_prompt:
            PROMPTED.add(name)
        if deadline_s is not None:
            BOUNDED[name] = deadline_s
        return fn

    return add


def with_prompt(spec: Any, messages: list[dict[str, Any]]) -> Any:
    """`spec` with `prompt: messages` added to every nested spec whose type is in `PROMPTED`."""
    if isinstance(spec, list):
        return [with_prompt(s, messages) for s in spec]
    if not isinstance(spec, dict):
        return spec
    out = {k: with_prompt(v, messages) for k, v in spec.items()}
    if out.get("type") in PROMPTED and "prompt" not in out:
        out["prompt"] = messages
    return out


def score_spec(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Score a completion against a verifier spec (used by `composite` for its parts)."""
    kind = spec.get("type")
    if kind not in VERIFIERS:
        raise UnknownVerifier(f"unknown verifier type {kind!r} (known: {', '.join(sorted(VERIFIERS))})")
    if kind in BOUNDED:
        return ctx.workers().score(kind, spec, completion, deadline_of(spec, BOUNDED[kind]))
    return VERIFIERS[kind](spec, completion, ctx)


def spec_problem(spec: Any) -> str | None:
    """Why no completion could be scored against `spec` (an unknown type, a missing field, a
    regex that does not compile), or None. Static: runs no completion and opens no sandbox."""
    if not isinstance(spec, dict):
        return f"a verifier spec is a mapping, got {type(spec).__name__}"
    kind = spec.get("type")
    if kind not in VERIFIERS:
        return f"unknown verifier type {kind!r} (known: {', '.join(sorted(VERIFIERS))})"
    try:
        if kind in CHECKS:
            CHECKS[kind](spec)
        if kind in BOUNDED:
            deadline_of(spec, BOUNDED[kind])
    except KeyError as exc:
        return f"the {kind!r} verifier spec needs the field {exc.args[0]!r}"
    except (ValueError, TypeError, re.error) as exc:
        return f"bad {kind!r} verifier spec: {exc}"
    return None


def deadline_of(spec: dict[str, Any], default: float) -> float:
    """The spec's `timeout_s` (seconds one scoring may take), else `default`.

    Raises:
        ValueError: `timeout_s` is not a finite positive number.
    """
    raw = spec.get("timeout_s", default)
    try:
        deadline = float(raw)
    except (TypeError, ValueError):
        deadline = math.nan
    if not 0 < deadline < math.inf:
        raise UserError(f"{spec.get('type')} verifier timeout_s must be a positive number of seconds, got {raw!r}")
    return deadline


def score(task: Task, completion: str, ctx: VerifierContext | None = None) -> Reward:
    """The one scoring call for training rewards and evaluation alike.

    Args:
        ctx: what verifiers share (the sandbox); None opens a short-lived context for this one
            call, which pays for opening a sandbox per code task: loops should pass one.
    """
    if ctx is None:
        with VerifierContext() as own:
            return score(task, completion, own)
    spec = with_prompt(task.verifier, task.chat()) if PROMPTED else task.verifier
    return writable(score_spec(spec, completion, ctx))


def writable(reward: Reward) -> Reward:
    """`reward` with text that always encodes as UTF-8: a completion's lone surrogate quoted in a
    detail or flag would otherwise make `model_dump_json()` raise (and crash `temper verify`)."""
    if all(_clean(t) == t for t in [reward.detail or "", *reward.flags]):
        return reward
    detail = None if reward.detail is None else _clean(reward.detail)
    return reward.model_copy(update={"detail": detail, "flags": [_clean(f) for f in reward.flags]})


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")
