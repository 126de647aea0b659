"""Built-in seeded generators (offline): arithmetic questions as tasks or SFT conversations.

Splits are disjoint by construction: "train" uses operand pairs whose sum is even,
"heldout" those whose sum is odd, so a held-out question never appears in training.
"""

from __future__ import annotations

import random

from tempering.types import Task

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
SPLITS = {"train": 0, "heldout": 1}


def arithmetic_questions(n: int, seed: int, split: str = "train", ops: str = "+-*") -> list[tuple[str, int]]:
    """`n` (question, answer) pairs: two-digit +, -, and x by a single digit (`ops` picks which)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    if not ops or set(ops) - set(OPS):
        raise ValueError(f"ops must be a non-empty subset of {''.join(OPS)!r}, got {ops!r}")
    rng = random.Random(f"{seed}:{split}" if ops == "+-*" else f"{seed}:{split}:{ops}")
    out: list[tuple[str, int]] = []
    while len(out) < n:
        op = rng.choice(list(ops))
        a, b = rng.randint(10, 99), rng.randint(2, 9) if op == "*" else rng.randint(10, 99)
        if (a + b) % 2 != SPLITS[split]:  # the split is decided on the final operands
            continue
        out.append((f"What is {a}{op}{b}? Answer with just the number.", OPS[op](a, b)))
    return out


def arithmetic_tasks(n: int, seed: int, split: str = "train", ops: str = "+-*",
                     verifier: dict | None = None) -> list[Task]:
    """Arithmetic `Task`s; the verifier spec defaults to `numeric` (`verifier` adds fields to it)."""
    name = "arith" if ops == "+-*" else "arith" + "".join({"+": "add", "-": "sub", "*": "mul"}[o] for o in ops)
    return [Task(id=f"{name}-{split}-{seed}-{i:05d}", prompt=q,
                 verifier={"type": "numeric", **(verifier or {}), "answer": str(a)},
                 track="reasoning", source=f"builtin:{name}")
            for i, (q, a) in enumerate(arithmetic_questions(n, seed, split, ops))]


def arithmetic_conversations(n: int, seed: int, split: str = "train") -> list[dict]:
    """The same questions answered correctly, as SFT conversations."""
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": str(a)}]}
            for q, a in arithmetic_questions(n, seed, split)]
