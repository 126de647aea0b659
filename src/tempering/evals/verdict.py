"""A gate verdict bound to what it judged, and the one way a verdict becomes a release.

`temper eval compare --gate` (and the pipeline's `gate` stage) write the candidate's identity
into the verdict (`evals.gate.judged_identity`): the hash of its weights
(`evals.cache.model_dir_hash`, the identity results and the eval cache use) and each suite's
hash with the file and task limit it came from. `promote_judged` is how the CLI
(`temper release promote`) and the pipeline's `release` stage release a model, and
`decide_judged` how a canary's second verdict (`temper release decide`) promotes the candidate; it refuses,
with a one-line `VerdictMismatch`, unless

- the verdict names the weights it judged, and the model to release hashes to them now: every
  top-level file of its directory (weights, config, tokenizer, chat template; an adapter's
  hash covers its base model's too), so two more training steps, an edited weight file or
  another checkpoint with someone else's verdict are refused;
- every suite it judged loads now and hashes as it did then (its tasks' full content, the
  templates, metrics and sampling), so a verdict on a suite since edited is refused.

Not checked: files in subfolders of the model dir (not part of `model_dir_hash`); the base
results the candidate was compared with (the rules' outcome is taken as recorded); who wrote
the verdict (a writer who can run `temper eval compare` can gate a model honestly only).
Suites built in memory (agent suites, GRPO held-out) record no file and cannot be re-checked,
so a verdict over them does not promote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tempering.runs.registry import Registry
from tempering.runs.releases import (
    CANDIDATE,
    PRODUCTION,
    CanaryDecision,
    Release,
    ReleaseError,
    Releases,
    check_verdict,
    shows_non_inferiority,
)


class VerdictMismatch(ReleaseError):
    """A verdict that does not judge the model being released, as it is now; one line."""


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _current_suite_hash(entry: Mapping[str, Any]) -> str:
    """The hash of a judged suite as it loads now (from its recorded file, else by name)."""
    from tempering.evals.suite import load_suite

    ref = entry.get("source") or entry["suite"]
    try:
        suite = load_suite(ref)
        if entry.get("limit"):
            suite = suite.with_overrides(limit=int(entry["limit"]))
        return suite.hash
    except (OSError, ValueError, KeyError) as exc:  # SuiteError is a ValueError
        raise VerdictMismatch(
            f"suite {entry['suite']!r} ({ref}) does not load to check the gate verdict against it: {_one_line(exc)}"
        ) from None


def check_judged(verdict: Mapping[str, Any], model: str | Path) -> None:
    """Refuse unless `verdict` judged `model`'s current weights on its suites as they are now.

    Raises:
        VerdictMismatch: naming the model or suite and what differs.
    """
    from tempering.evals.cache import model_dir_hash
    from tempering.models.load import ModelNotFound

    judged = verdict.get("candidate")
    suites = judged.get("suites") if isinstance(judged, Mapping) else None
    if not isinstance(judged, Mapping) or not judged.get("model_hash") or not isinstance(suites, list):
        raise VerdictMismatch(
            f"{model}: the gate verdict does not name the weights it judged (written by an older `temper eval "
            f"compare`, or its suites ran on different weights); evaluate this checkpoint and compare again"
        )
    if not suites or not all(isinstance(s, Mapping) and isinstance(s.get("suite"), str) for s in suites):
        raise VerdictMismatch(f"{model}: the gate verdict lists no judged suite; evaluate and compare again")
    try:
        actual = model_dir_hash(str(model))
    except ModelNotFound as exc:
        raise VerdictMismatch(f"{model}: cannot hash it to check the gate verdict: {_one_line(exc)}") from None
    if actual != judged["model_hash"]:
        raise VerdictMismatch(
            f"{model}: not the weights the gate judged (sha256 {actual[:12]} here, {str(judged['model_hash'])[:12]} "
            f"judged as {judged.get('model')}); evaluate and gate this checkpoint itself"
        )
    for entry in suites:
        now = _current_suite_hash(entry)
        if now != entry.get("hash"):
            raise VerdictMismatch(
                f"suite {entry['suite']!r} changed since the gate judged it (hash {entry.get('hash')} then, "
                f"{now} now); evaluate and gate again"
            )


def promote_judged(
    registry: Registry,
    model: str | Path,
    verdict: Mapping[str, Any] | None = None,
    *,
    alias: str = PRODUCTION,
    record: str | Path | None = None,
    reason: str | None = None,
) -> Release:
    """Release `model` under `alias` if `verdict` passed and judged it (`check_judged`).

    Args:
        verdict: a gate verdict dict; None: the newest one recorded for the model.
        record: a report file to record the verdict with, as an eval of the model.
    Raises:
        ReleaseError: a failed gate, a verdict of another shape, or a `VerdictMismatch`.
    """
    releases = Releases(registry)
    eval_id = None
    if verdict is None:
        verdict, eval_id = releases.recorded_verdict(model)
    verdict = check_verdict(verdict)
    if verdict["passed"]:  # a failed verdict is refused by `promote`, naming its failed rules
        check_judged(verdict, model)
    if record is not None:
        eval_id = registry.record_eval(model, record, gate=verdict)
    return releases.promote(model, gate=verdict, alias=alias, eval_id=eval_id, reason=reason)


def decide_judged(registry: Registry, canary_gate: Mapping[str, Any]) -> CanaryDecision:
    """The canary decision, with a promotion only on a verdict that judged the candidate's weights.

    A verdict that would roll the candidate back needs no binding (rolling back is the safe
    direction); one that would promote it must name the candidate release's model as it is now
    (`check_judged`), so another model's non-inferiority verdict cannot graduate it.

    Raises:
        ReleaseError: no candidate release, a verdict of another shape, or a `VerdictMismatch`.
    """
    releases = Releases(registry)
    verdict = check_verdict(canary_gate)
    promotes, _ = shows_non_inferiority(verdict)
    if promotes:
        candidate = releases.current(CANDIDATE)
        if candidate is None:
            raise ReleaseError(f"no release is {CANDIDATE!r}: nothing to decide")
        check_judged(verdict, candidate.model)
    return releases.decide(verdict)
