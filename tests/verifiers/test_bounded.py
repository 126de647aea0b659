"""Bounded verifiers: a deadline per call, a worker killed and replaced on overrun, threads never held."""

from __future__ import annotations

import pytest

from tempering.rollout.rollout import ThreadRewardWorkers
from tempering.types import Task
from tempering.verifiers import VerifierContext, VerifierContextClosed, score
from tempering.verifiers.bounded import BoundedWorkers

BOMB = "\\boxed{(10^{7})!}"  # sympy computes it: minutes in-process


def math_task(answer: str = "\\frac{1}{2}", **spec) -> Task:
    return Task(id="m", prompt="?", verifier={"type": "math", "answer": answer, **spec})


def test_a_bomb_times_out_and_the_next_answer_scores_in_a_fresh_worker():
    with VerifierContext(sandbox_size=1) as ctx:
        assert score(math_task(), "so \\boxed{0.5}", ctx).value == 1.0
        bomb = score(math_task(timeout_s=2), BOMB, ctx)
        assert bomb.value == 0.0 and bomb.flags == ["timeout"] and "2s" in bomb.detail
        assert ctx.workers().replaced == 1
        assert score(math_task(), "\\boxed{\\frac{2}{4}}", ctx).value == 1.0
        assert score(math_task(), "\\boxed{3}", ctx).value == 0.0


def test_a_bomb_does_not_hold_a_reward_thread():
    # One scoring thread: were the bomb to hold it, the correct answer behind it would never be scored.
    with VerifierContext(sandbox_size=1) as ctx, ThreadRewardWorkers(size=1, ctx=ctx) as workers:
        bomb = workers.submit(math_task(timeout_s=2), BOMB)
        good = workers.submit(math_task(), "\\boxed{1/2}")
        assert bomb.result(timeout=120).reward.flags == ["timeout"]
        verdict = good.result(timeout=120)
        assert verdict.status == "scored" and verdict.reward.value == 1.0


def test_spec_errors_come_back_as_themselves():
    with BoundedWorkers(size=1) as workers:
        with pytest.raises(KeyError, match="answer"):
            workers.score("math", {"type": "math"}, "1", deadline_s=30)
        with pytest.raises(ValueError, match="positive"):
            workers.score("math", {"type": "math", "answer": "1"}, "1", deadline_s=0)
    with pytest.raises(ValueError, match="timeout_s"):
        score(math_task(timeout_s=float("nan")), "1")


def test_a_closed_context_refuses_bounded_work():
    ctx = VerifierContext()
    ctx.close()
    with pytest.raises(VerifierContextClosed):
        score(math_task(), "1", ctx)
