"""Built-in seeded generators (offline): arithmetic questions as tasks or SFT conversations.

Splits are disjoint by construction. `split_by: parity` (the default, kept so earlier
results stay comparable): "train" uses operand pairs whose sum is even, "heldout" those
whose sum is odd. That rule has a cost found on the default model: every training answer
ends in an even digit and every held-out answer in an odd one, so a model trained on bare
answers drifts toward even last digits (half of its held-out errors were off by one).
`split_by: hash` puts a pair in "heldout" when a hash of "a op b" falls in one quarter of
its range, so both splits see every last digit, carry and operand range alike.

Phrasings: `canonical` is the one template ("What is A+B? Answer with just the number.");
`varied` draws each question from TRAIN_PHRASINGS (symbolic forms, instructions, word
problems) so a model trained on them learns the skill rather than one template;
`reworded` draws from REWORDED_PHRASINGS, a disjoint set kept for measuring whether a gain
holds on wordings never trained on. Every phrasing asks for the number alone.
"""

from __future__ import annotations

import hashlib
import random

from tempering.errors import UserError
from tempering.types import Task

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
SPLITS = {"train": 0, "heldout": 1}
CANONICAL = "What is {a}{op}{b}? Answer with just the number."
WORDS = {"+": "plus", "-": "minus", "*": "times"}
# Any operation: {a} {op} {b}, {word} (plus/minus/times).
TRAIN_PHRASINGS = {
    "any": [
        CANONICAL,
        "Compute {a} {op} {b}. Reply with only the result.",
        "{a} {op} {b} =",
        "Calculate {a}{op}{b}.",
        "What does {a} {word} {b} equal?",
        "Evaluate: {a} {op} {b}",
        "Q: {a} {op} {b}\nA:",
        "Give the value of {a} {op} {b}, nothing else.",
        "Solve {a} {op} {b} and write just the answer.",
        "Find {a} {word} {b}.",
    ],
    "+": [
        "Add {a} and {b}.",
        "What is the sum of {a} and {b}?",
        "Tom has {a} marbles and finds {b} more. How many marbles does Tom have now?",
        "A shop sold {a} cups on Monday and {b} cups on Tuesday. How many cups did it sell in total?",
        "If you put {a} books and {b} books on one shelf, how many books are on the shelf?",
    ],
}
REWORDED_PHRASINGS = {
    "any": [
        "{a} {op} {b} = ?",
        "Work out {a} {word} {b}. Only the number, please.",
        "Tell me the result of {a}{op}{b}.",
        "How much is {a} {word} {b}?",
        "Please answer: what's {a} {op} {b}?",
    ],
    "+": [
        "Sum up {a} and {b}.",
        "What do you get when you add {b} to {a}?",
        "Maria read {a} pages yesterday and {b} pages today. How many pages did she read altogether?",
        "A train has {a} passengers. At the next station {b} more get on. How many passengers are on the train now?",
        "There are {a} red balloons and {b} blue balloons. How many balloons are there?",
    ],
}
PHRASINGS = {"varied": TRAIN_PHRASINGS, "reworded": REWORDED_PHRASINGS}


def phrase(a: int, op: str, b: int, phrasing: str, rng: random.Random) -> str:
    """The question for `a op b` in the given phrasing (see the module docstring)."""
    if phrasing == "canonical":
        return CANONICAL.format(a=a, op=op, b=b)
    if phrasing not in PHRASINGS:
        raise UserError(f"phrasing must be one of canonical, {', '.join(PHRASINGS)}; got {phrasing!r}")
    table = PHRASINGS[phrasing]
    template = rng.choice(table["any"] + table.get(op, []))
    return template.format(a=a, op=op, b=b, word=WORDS[op])


def heldout_by_hash(a: int, op: str, b: int) -> bool:
    """The `hash` split rule: a quarter of all operand pairs, independent of their digits."""
    return hashlib.blake2b(f"{a}{op}{b}".encode(), digest_size=8).digest()[0] % 4 == 0


def arithmetic_questions(
    n: int, seed: int, split: str = "train", ops: str = "+-*", phrasing: str = "canonical", split_by: str = "parity"
) -> list[tuple[str, int]]:
    """`n` (question, answer) pairs: two-digit +, -, and x by a single digit (`ops` picks which)."""
    if split not in SPLITS:
        raise UserError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    if split_by not in ("parity", "hash"):
        raise UserError(f"split_by must be parity or hash, got {split_by!r}")
    if not ops or set(ops) - set(OPS):
        raise UserError(f"ops must be a non-empty subset of {''.join(OPS)!r}, got {ops!r}")
    rng = random.Random(f"{seed}:{split}" if ops == "+-*" else f"{seed}:{split}:{ops}")
    wording = random.Random(f"{seed}:{split}:{ops}:{phrasing}")  # the operands do not depend on it
    out: list[tuple[str, int]] = []
    while len(out) < n:
        op = rng.choice(list(ops))
        a, b = rng.randint(10, 99), rng.randint(2, 9) if op == "*" else rng.randint(10, 99)
        if split_by == "hash":
            if heldout_by_hash(a, op, b) != (split == "heldout"):
                continue
        elif (a + b) % 2 != SPLITS[split]:  # the split is decided on the final operands
            continue
        out.append((phrase(a, op, b, phrasing, wording), OPS[op](a, b)))
    return out


def arithmetic_tasks(
    n: int,
    seed: int,
    split: str = "train",
    ops: str = "+-*",
    verifier: dict | None = None,
    phrasing: str = "canonical",
    split_by: str = "parity",
) -> list[Task]:
    """Arithmetic `Task`s; the verifier spec defaults to `numeric` (`verifier` adds fields to it)."""
    name = "arith" if ops == "+-*" else "arith" + "".join({"+": "add", "-": "sub", "*": "mul"}[o] for o in ops)
    name += ("" if phrasing == "canonical" else f"-{phrasing}") + ("" if split_by == "parity" else f"-{split_by}")
    return [
        Task(
            id=f"{name}-{split}-{seed}-{i:05d}",
            prompt=q,
            verifier={"type": "numeric", **(verifier or {}), "answer": str(a)},
            track="reasoning",
            source=f"builtin:{name}",
        )
        for i, (q, a) in enumerate(arithmetic_questions(n, seed, split, ops, phrasing, split_by))
    ]


def arithmetic_conversations(n: int, seed: int, split: str = "train") -> list[dict]:
    """The same questions answered correctly, as SFT conversations."""
    return [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": str(a)}]}
        for q, a in arithmetic_questions(n, seed, split)
    ]
