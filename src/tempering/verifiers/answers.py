"""Answer verifiers: numeric, exact, regex, math.

The final-answer extraction rule (documented, shared by all four):
  1. the content of the last `\\boxed{...}` (balanced braces), if any;
  2. else the text after the last "answer is" / "answer:" (case-insensitive), to the end of
     that line, without trailing punctuation;
  3. else the whole completion, stripped.
`numeric` then takes the last number in that answer (`tempering.numbers.parse_number`: integers,
decimals, `a/b`, thousands separators removed) and compares values exactly (`122.0` equals `122`) or within
`rel_tol`/`abs_tol` when the spec gives them. Tolerances and `numeric_close` distances are
computed on exact Fractions too, so an answer of any size (a 400-digit number overflows a
float) is compared, not crashed on.

`math` runs sympy on the completion, whose cost the completion chooses (`(10^{7})!`), so
it is scored in a bounded worker (`tempering.verifiers.bounded`): past `timeout_s` (default
`MATH_DEADLINE_S`) the value is 0 with the flag `timeout`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from tempering.data.textnorm import canonical_text
from tempering.errors import UserError
from tempering.numbers import is_bare_number, parse_number
from tempering.types import Reward
from tempering.verifiers.base import register
from tempering.verifiers.context import VerifierContext

MATH_DEADLINE_S = 10.0
"""Default seconds the `math` verifier may take on one completion (spec `timeout_s`)."""
_ANSWER_IS = re.compile(r"answer(?:\s+is)?\s*[:=]?\s*", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def extract_final_answer(text: str) -> str:
    """The final answer of a completion, by the rule in the module docstring."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    matches = list(_ANSWER_IS.finditer(text))
    if matches:
        tail = text[matches[-1].end() :].split("\n", 1)[0]
        return tail.strip().rstrip(".!;,").strip()
    return text.strip()


def _needs_answer(spec: dict[str, Any]) -> None:
    spec["answer"]  # noqa: B018  (KeyError names the missing field)


def _needs_number(spec: dict[str, Any]) -> None:
    if parse_number(str(spec["answer"])) is None:
        raise UserError(f"{spec['type']} verifier answer is not a number: {spec['answer']!r}")
    for key in ("rel_tol", "abs_tol"):
        if key in spec:
            _tolerance(spec, key)


def _needs_pattern(spec: dict[str, Any]) -> None:
    re.compile(spec["pattern"])  # re.error names the position
    if spec.get("on", "answer") not in ("answer", "completion"):
        raise UserError(f"regex verifier 'on' must be 'answer' or 'completion', got {spec['on']!r}")


NO_ANSWER = "no_answer"
"""The flag of a reply in which the verifier found no answer to compare (no number, nothing after
"answer is", an empty reply, nothing math-verify could parse): the parse failures that GRPO logs
per step (`parse_failure_rate`) and the audits count (docs/verifiers.md)."""


def _reward(ok: bool, extracted: str | None) -> Reward:
    return Reward(
        value=1.0 if ok else 0.0,
        components={"correct": 1.0 if ok else 0.0},
        flags=[] if extracted else [NO_ANSWER],
        detail=f"extracted: {extracted!r}",
    )


@register("numeric", check=_needs_number)
def score_numeric(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    answer = extract_final_answer(completion)
    got, want = parse_number(answer), parse_number(str(spec["answer"]))
    if want is None:
        raise UserError(f"numeric verifier answer is not a number: {spec['answer']!r}")
    if got is None:
        return _reward(False, None)
    if "rel_tol" not in spec and "abs_tol" not in spec:
        return _reward(got == want, str(got))
    rel, abs_ = _tolerance(spec, "rel_tol"), _tolerance(spec, "abs_tol")
    ok = abs(got - want) <= max(rel * max(abs(got), abs(want)), abs_)  # math.isclose, in exact arithmetic
    return _reward(ok, str(got))


def _tolerance(spec: dict[str, Any], key: str) -> Fraction:
    try:
        value = Fraction(str(spec.get(key) or 0))
    except (ValueError, ZeroDivisionError):
        raise UserError(f"numeric verifier {key} must be a number, got {spec[key]!r}") from None
    if value < 0:
        raise UserError(f"numeric verifier {key} must be >= 0, got {spec[key]!r}")
    return value


@register("numeric_close", check=_needs_number)
def score_numeric_close(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Partial credit for nearness: max(0, 1 - |got - answer| / scale) on the `numeric` answer.

    A shaping term for RL (dense where exact correctness is rare). `scale` defaults to 10;
    with `bare_only: true` the reply must be just a number, else the value is 0.
    """
    if spec.get("bare_only") and not is_bare_number(completion):
        return Reward(value=0.0, components={"close": 0.0}, detail="not a bare number")
    got, want = parse_number(extract_final_answer(completion)), parse_number(str(spec["answer"]))
    if want is None:
        raise UserError(f"numeric_close verifier answer is not a number: {spec['answer']!r}")
    if got is None:
        return Reward(value=0.0, components={"close": 0.0}, flags=[NO_ANSWER], detail="extracted: None")
    scale = Fraction(str(spec.get("scale", 10)))
    if scale <= 0:
        raise UserError(f"numeric_close verifier scale must be > 0, got {spec['scale']!r}")
    value = float(max(Fraction(0), 1 - abs(got - want) / scale))  # in [0, 1]: the float cannot overflow
    return Reward(value=value, components={"close": value}, detail=f"extracted: {str(got)!r}")


@register("exact", check=_needs_answer)
def score_exact(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    answer = extract_final_answer(completion)
    return _reward(canonical_text(answer) == canonical_text(str(spec["answer"])), answer)


@register("regex", check=_needs_pattern)
def score_regex(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """`pattern` must fully match the extracted answer (`on: completion` to search the whole text)."""
    if spec.get("on", "answer") == "completion":  # no answer is extracted: nothing can fail to parse
        ok = re.search(spec["pattern"], completion) is not None
        return Reward(value=float(ok), components={"correct": float(ok)}, detail="searched the completion")
    answer = extract_final_answer(completion)
    return _reward(re.fullmatch(spec["pattern"], answer) is not None, answer)


@register("math", deadline_s=MATH_DEADLINE_S, check=_needs_answer)
def score_math(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """math-verify (offline): LaTeX, fractions, sets, intervals, `\\boxed{}`; in a bounded worker.

    math-verify parses the completion (LaTeX grammar; sympy's `parse_expr` only on a span of
    digits and operators), it never executes it, so a worker process is enough isolation.
    """
    from math_verify import parse, verify

    # math-verify documents None (no signal-based timeout; the worker bounds it) but annotates int
    gold = parse(f"${spec['answer']}$", parsing_timeout=None)  # pyright: ignore[reportArgumentType]
    pred = parse(completion, parsing_timeout=None)  # pyright: ignore[reportArgumentType]
    ok = bool(gold) and bool(pred) and verify(gold, pred, timeout_seconds=None)
    return _reward(ok, str(pred[-1]) if pred else None)
