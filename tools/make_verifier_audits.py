"""Write the labelled audit sets of the answer verifiers (src/tempering/verifiers/audits/*.jsonl).

Each row is a reply to a question whose answer is known, labelled by what a careful human grader
would say: `correct` true when the reply's final answer is the right one (units, separators and
LaTeX do not matter; a refusal is wrong even when it mentions the number; when a reply gives two
answers, the one it ends on counts unless it explicitly rejects it). The `case` names the
difficulty. The labels are written here by construction, never by running a verifier.

    python tools/make_verifier_audits.py      # deterministic: the same files every time
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "tempering" / "verifiers" / "audits"

# (question, answer, a wrong answer near it)
NUMERIC_ITEMS = [("12 + 7", 19, 20), ("48 + 37", 85, 84), ("9 * 8", 72, 64), ("1500 - 266", 1234, 1244),
                 ("2500 + 1750", 4250, 4205), ("100 - 142", -42, 42), ("7 / 2", "3.5", "3"),
                 ("600 * 7", 4200, 4100)]  # fmt: skip


def adder(rows: list[dict], question: str, spec: dict):
    """add(case, reply, correct): append one labelled row for this question."""

    def add(case: str, reply: str, correct: bool) -> None:
        rows.append({"case": case, "question": question, "spec": spec, "reply": reply, "correct": correct})

    return add


def _fmt_thousands(n: int) -> str:
    return f"{n:,}"


def numeric_rows() -> list[dict]:
    rows = []
    for q, a, w in NUMERIC_ITEMS:
        spec = {"type": "numeric", "answer": str(a)}
        A, W = str(a), str(w)
        add = adder(rows, f"What is {q}?", spec)

        add("bare", A, True)
        add("sentence", f"The answer is {A}.", True)
        add("working_then_answer", f"{q} = {A}", True)
        add("wrong_bare", W, False)
        add("wrong_sentence", f"The answer is {W}.", False)
        add("wrong_number_after_right", f"{A}? No wait, let me redo it: {q} = {W}.", False)
        add("right_then_rejected_wrong", f"The answer is {A}, not {W}.", True)
        add(
            "right_then_explanation_number",
            f"{A}, because {q} is {A} and adding 3 would give {int(float(A)) + 3}.",
            True,
        )
        add("boxed", f"So we get \\boxed{{{A}}}.", True)
        add("boxed_wrong_after_right_text", f"{q} = {A}, hence \\boxed{{{W}}}", False)
        add("refusal_mentions_answer", f"I cannot be certain whether {q} is {A}; I won't give an answer.", False)
        add("refusal_mentions_question", f"Sorry, I can't do arithmetic like {q}.", False)
        add("empty", "", False)
        add("no_number", "I don't know.", False)
        add("units", f"{A} apples", True)
        add("currency", f"${A}", True)
        if isinstance(a, int) and abs(a) >= 1000:
            add("thousands_comma", _fmt_thousands(a), True)
            add("thousands_space", f"{a:,}".replace(",", " "), True)
            add("thousands_comma_boxed", f"\\boxed{{{_fmt_thousands(a)}}}", True)
        if isinstance(a, int):
            add("trailing_zeros", f"{a}.00", True)
            add("latex_inline", f"The result is ${A}$.", True)
            words = {19: "nineteen", 85: "eighty-five", 72: "seventy-two", -42: "minus forty-two"}
            if a in words:
                add("words", words[a], True)
        else:
            add("latex_fraction", "\\frac{7}{2}", True)
            add("fraction", "7/2", True)
    return rows


EXACT_ITEMS = [("Spell 'hello' backwards.", "olleh", "hello"), ("Capital of France?", "Paris", "Lyon"),
               ("Chemical symbol for gold?", "Au", "Ag"), ("Opposite of 'cold'?", "hot", "warm"),
               ("Reverse the word 'stressed'.", "desserts", "dessert"), ("The first letter of the alphabet?", "A", "B"),
               ("Which planet is called the red planet?", "Mars", "Venus"),
               ("Sort the letters of 'cab'.", "abc", "acb")]  # fmt: skip


def exact_rows() -> list[dict]:
    rows = []
    for q, a, w in EXACT_ITEMS:
        spec = {"type": "exact", "answer": a}
        add = adder(rows, q, spec)

        add("bare", a, True)
        if a != "Au":  # a chemical symbol's case is part of it
            add("case_changed", a.upper() if a != a.upper() else a.lower(), True)
        add("answer_is", f"The answer is {a}.", True)
        add("answer_colon", f"Answer: {a}", True)
        add("extra_spaces", f"  {a}  ", True)
        add("boxed", f"\\boxed{{{a}}}", True)
        add("quoted", f'"{a}"', True)
        add("bold_markdown", f"**{a}**", True)
        add("wrong_bare", w, False)
        add("wrong_answer_is", f"The answer is {w}.", False)
        add("wrong_after_right", f"The answer is {a}. Hmm, no: the answer is {w}.", False)
        add("right_then_rejected_wrong", f"The answer is {a}, not {w}.", True)
        add("refusal_mentions_answer", f"It might be {a}, but I'd rather not answer.", False)
        add("explained", f"{a} (that is the answer to: {q})", True)
        add("empty", "", False)
    return rows


MATH_ITEMS = [("\\frac{1}{2}", ["0.5", "1/2", "\\frac{2}{4}", "\\dfrac{1}{2}"], ["\\frac{1}{3}", "2"]),
              ("3", ["3", "3.0", "x = 3", "\\boxed{3}"], ["-3", "\\frac{1}{3}"]),
              ("\\sqrt{2}", ["\\sqrt{2}", "2^{1/2}", "\\sqrt 2"], ["2", "\\sqrt{3}"]),
              ("\\pi", ["\\pi", "\\boxed{\\pi}"], ["3", "2\\pi"]),
              ("1234", ["1234", "1,234", "\\boxed{1234}"], ["1243", "123"]),
              ("-4", ["-4", "x = -4", "\\boxed{-4}"], ["4", "-5"]),
              ("\\frac{3}{4}", ["0.75", "\\frac{3}{4}", "3/4"], ["\\frac{4}{3}", "0.7"]),
              ("2x + 1", ["2x + 1", "1 + 2x", "2 x + 1"], ["2x - 1", "x + 2"])]  # fmt: skip


def math_rows() -> list[dict]:
    rows = []
    for gold, rights, wrongs in MATH_ITEMS:
        spec = {"type": "math", "answer": gold}
        add = adder(rows, f"gold {gold}", spec)

        for r in rights:
            add("equivalent_form", f"${r}$", True)
            add("sentence_boxed", f"Therefore the answer is $\\boxed{{{r}}}$.", True)
        for w in wrongs:
            add("wrong", f"$\\boxed{{{w}}}$", False)
            add("wrong_after_right", f"First I thought ${rights[0]}$, but the final answer is $\\boxed{{{w}}}$.", False)
        add("right_after_wrong", f"Not ${wrongs[0]}$: the answer is $\\boxed{{{rights[0]}}}$.", True)
        add("refusal_mentions_answer", f"I think it could be ${rights[0]}$ but I cannot answer this.", False)
        add("empty", "", False)
        add("plain_text", f"The answer is {rights[0]}", True)
    return rows


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("numeric", numeric_rows()), ("exact", exact_rows()), ("math", math_rows())):
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"id": f"{name}-{i:03d}", **r}) + "\n" for i, r in enumerate(rows)))
        print(f"{path}: {len(rows)} rows, {sum(r['correct'] for r in rows)} correct")


if __name__ == "__main__":
    main()
