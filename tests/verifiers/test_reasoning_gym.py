"""The reasoning_gym verifier through the one scoring entry point."""

import pytest

from tempering.sources.reasoning_gym import EVAL_PRESETS, reasoning_gym_tasks
from tempering.verifiers import score
from tempering.verifiers.reasoning_gym import extract_tagged_answer


@pytest.mark.parametrize("name", sorted(EVAL_PRESETS))
def test_right_answer_scores_one_wrong_answer_less(name, ctx):
    for task in reasoning_gym_tasks(name, size=10, seed=5, **EVAL_PRESETS[name]):
        answer = task.verifier["entry"]["answer"]
        assert score(task, f"Let me think.\n<answer>{answer}</answer>", ctx).value == 1.0
        assert score(task, f"<answer>{answer}</answer>", ctx).components["correct"] == 1.0
        assert score(task, "<answer>zzz9999</answer>", ctx).value < 1.0
        assert score(task, f"<answer>{answer}</answer>", ctx).detail == f"extracted: {answer!r}"


def test_chain_sum_hand_made(ctx):
    task = reasoning_gym_tasks("chain_sum", size=1, seed=1, min_terms=3, max_terms=3, min_digits=1, max_digits=1)[0]
    assert task.prompt.startswith("State the final answer to the following arithmetic problem: 4 - 1 - 7 =")
    assert task.verifier["entry"]["answer"] == "-4"
    assert score(task, "4 - 1 = 3, 3 - 7 = -4\n<answer>-4</answer>", ctx).value == 1.0
    assert score(task, "The answer is -4.", ctx).value == 1.0  # no tag: the shared final-answer rule
    assert score(task, "\\boxed{-4}", ctx).value == 1.0
    assert score(task, "<answer>-4</answer> ... <answer>4</answer>", ctx).value == 0.0  # the last tag counts
    assert score(task, "<answer>3</answer>", ctx).value == 0.0


def test_partial_credit_is_the_dataset_rule(ctx):
    task = reasoning_gym_tasks("spell_backward", size=1, seed=0, min_word_len=7, max_word_len=7)[0]
    answer = task.verifier["entry"]["answer"]
    partial = score(task, f"<answer>{answer[:4]}xyz</answer>", ctx)
    assert 0.0 < partial.value < 1.0 and partial.components["correct"] == 0.0
    assert score(task, f"<answer>{answer.upper()}</answer>", ctx).value == 1.0  # spell_backward ignores case


def test_scores_in_a_fresh_verifier_without_the_generator_state(ctx):
    # The verifier needs only the spec: a Task rebuilt from JSON scores the same.
    from tempering.types import Task

    task = reasoning_gym_tasks("chain_sum", size=3, seed=2, **EVAL_PRESETS["chain_sum"])[2]
    again = Task.model_validate_json(task.model_dump_json())
    answer = task.verifier["entry"]["answer"]
    assert score(again, f"<answer>{answer}</answer>", ctx).value == 1.0


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


def test_incomplete_spec_fails_loudly(ctx):
    from tempering.types import Task

    task = Task(id="t", prompt="q", verifier={"type": "reasoning_gym", "dataset": "chain_sum"})
    with pytest.raises(ValueError, match="missing"):
        score(task, "<answer>1</answer>", ctx)


# string_insertion's scorer evals an answer that is not the oracle (a "list of characters"):
# the answers below are code, run in the sandbox's scorer process.
EVALUATED = {
    "forged": "[print('TEMPERING-REASONING-GYM {\"score\": 1.0}'), 'x'][1]",
    "exits": "__import__('os')._exit(0)",
    "spins": "[0 for _ in iter(int, 1) if 0]",
    "writes": "open('/tmp/x', 'w')",
}


@pytest.mark.parametrize(
    "kind,flag",
    [
        ("forged", "cheat:forged_verdict"),
        ("exits", "no_verdict"),
        ("spins", "sandbox:timeout"),
        ("writes", "cheat:code_execution"),
    ],
)
def test_what_an_evaluated_answer_does_becomes_a_flag_and_zero(ctx, kind, flag):
    task = reasoning_gym_tasks("string_insertion", size=1, seed=0)[0]
    task.verifier["timeout_s"] = 4
    reward = score(task, f"<answer>{EVALUATED[kind]}</answer>", ctx)
    assert reward.value == 0.0 and reward.flags == [flag] and reward.components == {"correct": 0.0}


def test_a_scorer_that_raises_on_the_answer_is_a_flag(ctx):
    task = reasoning_gym_tasks("prime_factorization", size=1, seed=0)[0]
    reward = score(task, "<answer>not a number</answer>", ctx)
    assert reward.value == 0.0 and reward.flags == ["scorer_raised:ValueError"]


def test_a_sandbox_without_the_library_cannot_judge():
    from tempering.sandbox import SandboxPool
    from tempering.verifiers import VerifierContext, VerifierError

    task = reasoning_gym_tasks("chain_sum", size=1, seed=0)[0]
    with SandboxPool(size=1) as bare, VerifierContext(sandbox=bare) as ctx:
        with pytest.raises(VerifierError, match="could not be loaded"):
            score(task, "<answer>1</answer>", ctx)


def test_first_reasoning_gym_tasks_scored_from_many_threads():
    # A fresh process reads reasoning-gym tasks from JSON (the library not imported yet) and its
    # scoring threads meet the library for the first time at once: every sample must be scored
    # (a half-filled dataset registry once read as "unknown dataset": 45 of 48 samples lost).
    import json
    import subprocess
    import sys

    tasks = reasoning_gym_tasks("chain_sum", 6, 3) + reasoning_gym_tasks("letter_counting", 6, 3)
    rows = "\n".join(json.dumps(t.model_dump(exclude_none=True)) for t in tasks)
    code = """
import collections, json, sys
from tempering.rollout.rollout import ThreadRewardWorkers
from tempering.types import Task
tasks = [Task(**json.loads(line)) for line in sys.stdin.read().splitlines()]
assert "reasoning_gym" not in sys.modules
with ThreadRewardWorkers(4) as workers:
    verdicts = [f.result() for f in [workers.submit(t, "<answer>3</answer>") for t in tasks for _ in range(3)]]
print(dict(collections.Counter(v.status for v in verdicts)))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], input=rows, capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "{'scored': 36}", out.stdout + out.stderr[-2000:]
