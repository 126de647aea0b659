"""The reasoning_gym verifier through the one scoring entry point."""

import pytest

from tempering.sources.reasoning_gym import EVAL_PRESETS, reasoning_gym_tasks
from tempering.verifiers import score
from tempering.verifiers.reasoning_gym import extract_tagged_answer


@pytest.mark.parametrize("name", sorted(EVAL_PRESETS))
def test_right_answer_scores_one_wrong_answer_less(name):
    for task in reasoning_gym_tasks(name, size=10, seed=5, **EVAL_PRESETS[name]):
        answer = task.verifier["entry"]["answer"]
        assert score(task, f"Let me think.\n<answer>{answer}</answer>").value == 1.0
        assert score(task, f"<answer>{answer}</answer>").components["correct"] == 1.0
        assert score(task, "<answer>zzz9999</answer>").value < 1.0
        assert score(task, f"<answer>{answer}</answer>").detail == f"extracted: {answer!r}"


def test_chain_sum_hand_made():
    task = reasoning_gym_tasks("chain_sum", size=1, seed=1, min_terms=3, max_terms=3, min_digits=1, max_digits=1)[0]
    assert task.prompt.startswith("State the final answer to the following arithmetic problem: 4 - 1 - 7 =")
    assert task.verifier["entry"]["answer"] == "-4"
    assert score(task, "4 - 1 = 3, 3 - 7 = -4\n<answer>-4</answer>").value == 1.0
    assert score(task, "The answer is -4.").value == 1.0  # no tag: the shared final-answer rule
    assert score(task, "\\boxed{-4}").value == 1.0
    assert score(task, "<answer>-4</answer> ... <answer>4</answer>").value == 0.0  # the last tag counts
    assert score(task, "<answer>3</answer>").value == 0.0


def test_partial_credit_is_the_dataset_rule():
    task = reasoning_gym_tasks("spell_backward", size=1, seed=0, min_word_len=7, max_word_len=7)[0]
    answer = task.verifier["entry"]["answer"]
    partial = score(task, f"<answer>{answer[:4]}xyz</answer>")
    assert 0.0 < partial.value < 1.0 and partial.components["correct"] == 0.0
    assert score(task, f"<answer>{answer.upper()}</answer>").value == 1.0  # spell_backward ignores case


def test_scores_in_a_fresh_verifier_without_the_generator_state():
    # The verifier needs only the spec: a Task rebuilt from JSON scores the same.
    from tempering.types import Task

    task = reasoning_gym_tasks("chain_sum", size=3, seed=2, **EVAL_PRESETS["chain_sum"])[2]
    again = Task.model_validate_json(task.model_dump_json())
    answer = task.verifier["entry"]["answer"]
    assert score(again, f"<answer>{answer}</answer>").value == 1.0


@pytest.mark.parametrize(
    "text,answer",
    [
        ("<think>2+2</think><answer> 4 </answer>", "4"),
        ("<answer>a\nb</answer> then <answer>c</answer>", "c"),
        ("no tags, the answer is 12.", "12"),
    ],
)
def test_extraction_rule(text, answer):
    assert extract_tagged_answer(text) == answer


def test_incomplete_spec_fails_loudly():
    from tempering.types import Task

    task = Task(id="t", prompt="q", verifier={"type": "reasoning_gym", "dataset": "chain_sum"})
    with pytest.raises(ValueError, match="missing"):
        score(task, "<answer>1</answer>")
