"""The verifier registry and the one scoring entry point."""

from __future__ import annotations

from typing import Any, Callable

from tempering.types import Reward, Task

ScoreFn = Callable[[dict[str, Any], str], Reward]
VERIFIERS: dict[str, ScoreFn] = {}


class UnknownVerifier(KeyError):
    pass


class VerifierError(RuntimeError):
    """The verifier could not judge (its sandbox failed, the task's own tests are broken).

    Never the model's fault: callers must skip the sample, not score it as a failure.
    """


def register(name: str) -> Callable[[ScoreFn], ScoreFn]:
    def add(fn: ScoreFn) -> ScoreFn:
        VERIFIERS[name] = fn
        return fn
    return add


def score_spec(spec: dict[str, Any], completion: str) -> Reward:
    """Score a completion against a verifier spec (used by `composite` for its parts)."""
    kind = spec.get("type")
    if kind not in VERIFIERS:
        raise UnknownVerifier(f"unknown verifier type {kind!r} (known: {', '.join(sorted(VERIFIERS))})")
    return VERIFIERS[kind](spec, completion)


def score(task: Task, completion: str) -> Reward:
    """The one scoring call for training rewards and evaluation alike."""
    return score_spec(task.verifier, completion)
