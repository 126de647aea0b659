"""HumanEval as `code` tasks: 164 ids in order, specs the verifier accepts, hidden tests hidden."""

import pytest

from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks
from tempering.verifiers.code import CodeSpec


def test_ids_and_fields():
    tasks = humaneval_tasks()
    assert [t.id for t in tasks] == [f"HumanEval/{i}" for i in range(164)]
    first = tasks[0]
    assert first.track == "code" and first.source == "humaneval"
    assert first.prompt.startswith("from typing import List") and "def has_close_elements(" in first.prompt
    spec = CodeSpec.model_validate(first.verifier)
    assert spec.entry_point == "has_close_elements" and spec.prompt == first.prompt
    assert "def check(candidate)" in spec.tests


@pytest.mark.parametrize("style", ["completion", "chat"])
def test_hidden_tests_never_appear_in_the_prompt(style):
    for task in humaneval_tasks(style):
        shown = task.prompt if style == "completion" else task.chat()[0]["content"]
        tests = task.verifier["tests"]
        assert "def check(" not in shown and "METADATA" not in shown, task.id
        asserts = [line.strip() for line in tests.splitlines() if line.strip().startswith("assert candidate")]
        assert not any(a in shown for a in asserts), task.id


def test_chat_style_asks_for_the_whole_function():
    task = humaneval_tasks("chat")[0]
    assert task.prompt is None
    content = task.chat()[0]["content"]
    assert "```python" in content and "def has_close_elements(" in content
    assert task.verifier == humaneval_tasks()[0].verifier


def test_canonical_solution_and_unknown_ids():
    assert "return False" in humaneval_canonical("HumanEval/0")
    with pytest.raises(KeyError, match="HumanEval/164"):
        humaneval_canonical("HumanEval/164")
    with pytest.raises(ValueError, match="style"):
        humaneval_tasks("fewshot")
