"""Numbers in answers: the one number pattern, and a parse that compares values exactly.

A number is an integer or decimal with optional sign and thousands separators (`-1,234.5`),
optionally a fraction `a/b`, or a leading-dot decimal (`.5`). Values are exact Fractions,
so `4181.00` equals `4181` and `1/2` equals `0.5` (as math-verify judges them). The agent
`answer` goal, the `numeric` verifiers, the strict-format pattern, failure clustering and
the float literals of eval gate rules all take their number patterns from here.
"""

from __future__ import annotations

import re
from fractions import Fraction

DECIMAL = r"[-+]?\d[\d,]*(?:\.\d+)?"
"""An integer or decimal, optional sign and thousands separators."""
NUMBER = re.compile(rf"{DECIMAL}(?:\s*/\s*\d+)?|[-+]?\.\d+")
"""Any number as found in text (a decimal, a fraction a/b, or .5)."""
BARE_NUMBER_PATTERN = rf"^\s*{DECIMAL}\s*$"
"""A reply that is only a number (the strict format the arithmetic prompts ask for)."""
UNSIGNED_FLOAT = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
"""A float literal without sign (`3`, `0.5`, `.5`, `1e-3`): the numbers of eval gate rules."""
FLOAT_LITERAL = rf"[+-]?{UNSIGNED_FLOAT}"
"""A float literal with optional sign."""


def _value(raw: str) -> Fraction | None:
    try:
        return Fraction(raw.replace(",", "").replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The last number in `text` as an exact Fraction, or None."""
    found = NUMBER.findall(text)
    return _value(found[-1]) if found else None


def as_number(text: str) -> Fraction | None:
    """`text` as an exact Fraction when the whole of it (stripped) is one number, else None."""
    return _value(text.strip()) if NUMBER.fullmatch(text.strip()) else None


def is_bare_number(text: str) -> bool:
    """Whether `text` is nothing but one decimal number (surrounding whitespace allowed)."""
    return re.match(BARE_NUMBER_PATTERN, text) is not None
