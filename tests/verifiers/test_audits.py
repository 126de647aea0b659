"""Verifier audits: every audited verifier's labelled set has at least 100 replies with the hard
cases, its measured false-positive / false-negative / no-answer rates are the ones docs/verifiers.md
states, and a planted extraction bug (the first number instead of the last) moves the rates."""

import re
from fractions import Fraction
from pathlib import Path

import pytest

from tempering import numbers
from tempering.verifiers import answers
from tempering.verifiers.audit import AUDITED, audit, audit_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "verifiers.md"
NUMERIC_HARD_CASES = {
    "wrong_number_after_right",
    "units",
    "thousands_comma",
    "thousands_space",
    "latex_inline",
    "latex_fraction",
    "boxed",
    "refusal_mentions_answer",
    "refusal_mentions_question",
}


def documented_rates(name: str) -> tuple[str, str, str]:
    """(fp, fn, no answer) as docs/verifiers.md's audit table prints them for verifier `name`."""
    row = re.search(rf"^\| `{name}` \| \d+ \| \d+ / \d+ \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", DOC.read_text(), re.M)
    assert row is not None, f"docs/verifiers.md has no audit row for {name}"
    return row.group(1).strip(), row.group(2).strip(), row.group(3).strip()


def printed(result: dict) -> tuple[str, str, str]:
    return (
        f"{result['fp_rate']:.1%} ({result['false_positives']})",
        f"{result['fn_rate']:.1%} ({result['false_negatives']})",
        f"{result['no_answer_rate']:.1%}",
    )


@pytest.mark.parametrize("name", AUDITED)
def test_each_audit_has_100_labelled_replies_and_the_documented_rates(name):
    rows = audit_rows(name)
    assert len(rows) >= 100 and {True, False} <= {r["correct"] for r in rows}
    assert len({r["id"] for r in rows}) == len(rows)
    assert printed(audit(name)) == documented_rates(name)


def test_the_numeric_audit_holds_the_hard_cases():
    cases = {r["case"] for r in audit_rows("numeric")}
    assert NUMERIC_HARD_CASES <= cases, NUMERIC_HARD_CASES - cases


def test_a_planted_first_number_bug_shows_in_the_numeric_audit(monkeypatch):
    """The verifier taking the first number of the answer instead of the last passes "19? No
    wait: 12 + 7 = 20" and fails "12 + 7 = 19": both rates move."""
    honest = audit("numeric")

    def first_number(text: str) -> Fraction | None:
        found = numbers.NUMBER.findall(text)
        return numbers._value(found[0]) if found else None

    monkeypatch.setattr(answers, "parse_number", first_number)
    planted = audit("numeric")
    assert planted["fp_rate"] > honest["fp_rate"] + 0.05
    assert planted["fn_rate"] != honest["fn_rate"]
    assert "wrong_number_after_right" in planted["errors_by_case"]
    assert "wrong_number_after_right" not in honest["errors_by_case"]
