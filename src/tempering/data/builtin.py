"""Built-in seeded data generators (offline): arithmetic conversations for SFT demos."""

from __future__ import annotations

import random

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def arithmetic_conversations(n: int, seed: int, split: str = "train") -> list[dict]:
    """`n` conversations asking a two-operand arithmetic question, answered correctly.

    `split` ("train" / "heldout") picks disjoint operand pairs (a + b even vs odd), so a
    held-out question never appears in training.
    """
    rng = random.Random(f"{seed}:{split}")
    parity = 0 if split == "train" else 1
    rows = []
    while len(rows) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a + b) % 2 != parity:
            continue
        op = rng.choice(list(OPS))
        if op == "*":
            b = rng.randint(2, 9)
        question = f"What is {a}{op}{b}? Answer with just the number."
        rows.append({"messages": [{"role": "user", "content": question},
                                  {"role": "assistant", "content": str(OPS[op](a, b))}]})
    return rows
