"""Verifier audits: each answer verifier's labelled replies (`verifiers/audits/NAME.jsonl`) and its
measured error rates.

A row is a reply to a question with a known answer, labelled `correct` by what a careful grader
would say (tools/make_verifier_audits.py writes them by construction, never by running a
verifier), with a `case` naming the difficulty: a wrong number after the right one, units,
thousands separators, LaTeX, a refusal that mentions the number, ... The audit scores every row
with the verifier and counts

  false positive   the verifier passes a reply the label calls wrong   (fp_rate = FP / wrong replies)
  false negative   the verifier fails a reply the label calls right    (fn_rate = FN / right replies)
  no answer        the verifier found no answer in the reply (the `no_answer` flag)

docs/verifiers.md holds the figures; tests/verifiers/test_audits.py recomputes them.
"""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from typing import Any, Callable

from tempering.errors import UserError
from tempering.types import Reward
from tempering.verifiers.answers import NO_ANSWER

AUDITED = ("numeric", "exact", "math")
"""The verifiers that ship an audit set."""


def audit_rows(name: str) -> list[dict[str, Any]]:
    """The labelled rows of verifier `name`'s audit set."""
    if name not in AUDITED:
        raise UserError(f"no audit set for verifier {name!r} (audited: {', '.join(AUDITED)})")
    text = resources.files("tempering.verifiers").joinpath("audits", f"{name}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def audit(name: str, score: Callable[[dict, str], Reward] | None = None) -> dict[str, Any]:
    """Score verifier `name`'s audit set; its error rates, counts and the rows it got wrong.

    Args:
        score: (spec, reply) -> Reward; default: the registered verifier with one shared context.
    """
    rows = audit_rows(name)
    if score is None:
        from tempering.verifiers import VerifierContext
        from tempering.verifiers.base import score_spec

        with VerifierContext(sandbox_size=1) as ctx:
            rewards = [score_spec(dict(r["spec"]), r["reply"], ctx) for r in rows]
    else:
        rewards = [score(dict(r["spec"]), r["reply"]) for r in rows]
    errors, by_case = [], Counter()
    fp = fn = no_answer = 0
    for row, reward in zip(rows, rewards):
        no_answer += NO_ANSWER in reward.flags
        if reward.passed != row["correct"]:
            fp += not row["correct"]
            fn += row["correct"]
            by_case[row["case"]] += 1
            errors.append({"id": row["id"], "case": row["case"], "reply": row["reply"], "label": row["correct"]})
    positives = sum(r["correct"] for r in rows)
    negatives = len(rows) - positives
    return {
        "verifier": name,
        "replies": len(rows),
        "right_replies": positives,
        "wrong_replies": negatives,
        "false_positives": fp,
        "false_negatives": fn,
        "fp_rate": fp / negatives if negatives else 0.0,
        "fn_rate": fn / positives if positives else 0.0,
        "no_answer_rate": no_answer / len(rows),
        "errors_by_case": dict(sorted(by_case.items())),
        "errors": errors,
    }
