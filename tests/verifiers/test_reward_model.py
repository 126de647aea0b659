"""The `reward_model` verifier type: registration, prompt injection, shared loading, errors."""

import pytest

from tempering.types import Task
from tempering.verifiers import VERIFIERS, VerifierContext, VerifierContextClosed, score
from tempering.verifiers.base import PROMPTED, with_prompt


def test_registered_as_a_prompted_verifier():
    assert "reward_model" in VERIFIERS and "reward_model" in PROMPTED


def test_with_prompt_reaches_composite_parts_and_keeps_a_given_prompt():
    msgs = [{"role": "user", "content": "hi"}]
    spec = {
        "type": "composite",
        "parts": [
            {"name": "rm", "weight": 1.0, "verifier": {"type": "reward_model", "model": "m"}},
            {"name": "own", "weight": 1.0, "verifier": {"type": "reward_model", "model": "m", "prompt": "given"}},
            {"name": "num", "weight": 1.0, "verifier": {"type": "numeric", "answer": "1"}},
        ],
    }
    out = with_prompt(spec, msgs)
    parts = [p["verifier"] for p in out["parts"]]
    assert parts[0]["prompt"] == msgs and parts[1]["prompt"] == "given" and "prompt" not in parts[2]
    assert "prompt" not in spec["parts"][0]["verifier"]  # the task's spec is not mutated


def test_missing_model_and_non_reward_model_dirs_fail_with_a_message(tmp_path):
    from tempering.models.reward import NotARewardModel

    task = Task(id="t", prompt="q", verifier={"type": "reward_model"})
    with pytest.raises(ValueError, match="needs 'model'"):
        score(task, "a")
    task = Task(id="t", prompt="q", verifier={"type": "reward_model", "model": str(tmp_path)})
    with pytest.raises(NotARewardModel, match="not a reward model"):
        score(task, "a")


def test_context_shares_one_object_per_key_until_closed():
    calls = []
    ctx = VerifierContext()
    first = ctx.shared("k", lambda: calls.append(1) or object())
    assert ctx.shared("k", lambda: calls.append(1) or object()) is first and calls == [1]
    ctx.close()
    with pytest.raises(VerifierContextClosed):
        ctx.shared("k", object)
