"""The agent `answer` goal judges numbers as the `numeric` verifier does: by exact value."""

import pytest

from tempering.agents.goals import answer_correct
from tempering.types import Task
from tempering.verifiers import score

# (goal value, submitted answer, correct?): hand-written, values compared as exact fractions
CASES = [
    ("4181", "4181", True),
    ("4181", "4181.00", True),  # trailing zeros do not change the value
    ("4181", "4181.0", True),
    ("4181", "4,181", True),  # thousands separator
    ("4181", "the answer is 4181", True),  # the last number in the answer counts
    ("4181", "4181.5", False),
    ("4181", "4180", False),
    ("0.5", "1/2", True),  # a fraction has its value
    ("1/2", "0.5", True),
    ("1/2", "2/4", True),
    ("0.5", ".5", True),
    ("-3", "-3.000", True),
    ("-3", "3", False),
    ("1/3", "0.333", False),  # exact, not rounded
    ("0.5", "no number", False),
]


@pytest.mark.parametrize(("want", "answer", "correct"), CASES)
def test_answer_goal_compares_numbers_by_value(want, answer, correct):
    assert answer_correct({"type": "answer", "value": want}, answer) is correct


@pytest.mark.parametrize(("want", "answer", "correct"), CASES)
def test_answer_goal_and_numeric_verifier_agree_on_numbers(want, answer, correct):
    task = Task(id="t", prompt="?", verifier={"type": "numeric", "answer": want})
    assert score(task, answer).value == (1.0 if correct else 0.0)
    assert answer_correct({"type": "answer", "value": want}, answer) is correct


def test_answer_goal_with_a_text_value_compares_the_stripped_text():
    goal = {"type": "answer", "value": "Paris"}
    assert answer_correct(goal, "  Paris ")
    assert not answer_correct(goal, "paris")
    assert not answer_correct(goal, None)
