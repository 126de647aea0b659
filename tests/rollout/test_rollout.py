"""The one rollout path: trajectories, the failure policy (crash / timeout), left padding."""

import subprocess
import sys
import time

import pytest
import torch

from tempering.config import SamplingSettings
from tempering.data.padding import left_pad
from tempering.rollout.engine import HFEngine
from tempering.rollout.rollout import VERIFIER_ERROR, ThreadRewardWorkers, rollout, unjudged_reasons
from tempering.types import Reward, Task
from tempering.verifiers import VERIFIERS, register
from tests.conftest import tiny_llama


@register("test_rollout_ok")
def _ok(spec, completion, ctx=None):
    return Reward(value=1.0, components={"correct": 1.0})


@register("test_rollout_crash")
def _crash(spec, completion, ctx=None):
    raise KeyError("judge lost its tests")  # not a VerifierError: still a verifier failure


@register("test_rollout_slow")
def _slow(spec, completion, ctx=None):
    time.sleep(spec["seconds"])
    return Reward(value=1.0)


@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    return HFEngine(model, smol_tokenizer, precision="fp32")


def _task(i, spec):
    return Task(id=f"t{i}", prompt=f"question {i}", verifier=spec)


def test_trajectories_hold_prompt_and_completion_tokens_with_mask_and_logprobs(engine):
    tasks = [_task(0, {"type": "test_rollout_ok"}), _task(1, {"type": "test_rollout_ok"})]
    with ThreadRewardWorkers(2) as workers:
        groups = rollout(tasks, engine, SamplingSettings(max_new_tokens=5), workers, n=3, seed=1)
    assert [len(g) for g in groups] == [3, 3]
    for task, group in zip(tasks, groups):
        prompt = engine.chat_prompt(task.chat())
        for j, t in enumerate(group):
            assert t.task_id == task.id and t.sample == j and t.status == "scored" and t.reward.value == 1.0
            assert t.token_ids[: t.prompt_length] == prompt and 1 <= len(t.completion_ids) <= 5
            assert t.loss_mask == [0] * len(prompt) + [1] * len(t.completion_ids)
            assert all(lp == 0.0 for lp in t.logprobs[: t.prompt_length])
            assert all(lp <= 0.0 for lp in t.completion_logprobs) and any(lp < 0 for lp in t.completion_logprobs)
            assert t.messages[:-1] == task.chat() and t.messages[-1]["role"] == "assistant"
    with ThreadRewardWorkers(2) as workers:  # same seed, same samples
        again = rollout(tasks, engine, SamplingSettings(max_new_tokens=5), workers, n=3, seed=1)
    assert [[t.token_ids for t in g] for g in again] == [[t.token_ids for t in g] for g in groups]


def test_a_crashing_or_slow_verifier_is_recorded_as_such_never_as_a_model_failure(engine):
    tasks = [
        _task(0, {"type": "test_rollout_ok"}),
        _task(1, {"type": "test_rollout_crash"}),
        _task(2, {"type": "test_rollout_slow", "seconds": 3.0}),
    ]
    with ThreadRewardWorkers(4) as workers:
        groups = rollout(tasks, engine, SamplingSettings(max_new_tokens=3), workers, n=2, seed=0, timeout_s=0.5)
    ok, crashed, slow = groups
    assert {t.status for t in ok} == {"scored"}
    assert {t.status for t in crashed} == {"verifier_error"} and {t.status for t in slow} == {"timeout"}
    for t in crashed + slow:
        assert not t.scored and t.reward.flags == [VERIFIER_ERROR] and t.reward.value == 0.0
    assert "KeyError" in crashed[0].reward.detail and "timed out" in slow[0].reward.detail
    # the one-line warning callers print: counts and reasons, commonest first
    assert unjudged_reasons([ok]) == ""
    assert unjudged_reasons(groups) == (
        "4 of 6 samples not judged (never counted as failures): "
        "verifier_error: KeyError: 'judge lost its tests' x2; timeout: verifier timed out after 0.5s x2"
    )
    assert unjudged_reasons(groups, top=1).endswith("x2; 1 other reason(s)")


def test_left_pad_right_aligns_each_sequence():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert ids.dtype == mask.dtype == torch.long


def test_the_trajectory_type_imports_without_torch():
    code = "import sys, tempering.types as t; t.Trajectory; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def teardown_module():
    for name in ("test_rollout_ok", "test_rollout_crash", "test_rollout_slow"):
        VERIFIERS.pop(name, None)
