"""`VerifierContext`: the sandbox reaches verifiers through a context object, not a module global."""

from __future__ import annotations

import threading

import pytest

import tempering.verifiers.code as code_module
from tempering.sandbox import SandboxPool
from tempering.types import Task
from tempering.verifiers import VerifierContext, VerifierContextClosed, score


class CountingSandbox:
    """A real pool that counts the runs it was given (to see which sandbox a verifier used)."""

    def __init__(self, pool):
        self.pool, self.runs = pool, 0
        self._lock = threading.Lock()

    def exec(self, *args, **kwargs):
        with self._lock:
            self.runs += 1
        return self.pool.exec(*args, **kwargs)


def add_task(verifier: dict | None = None) -> Task:
    prompt = "def add(a, b):\n"
    code = {
        "type": "code",
        "entry_point": "add",
        "prompt": prompt,
        "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    }
    return Task(id="t", prompt=prompt, verifier=verifier or code, track="code")


def test_a_given_sandbox_is_used_and_left_open(ctx):
    counting = CountingSandbox(ctx.sandbox())
    with VerifierContext(sandbox=counting) as mine:
        assert mine.sandbox() is counting
        assert score(add_task(), "    return a + b\n", mine).value == 1.0
    assert counting.runs == 1
    assert ctx.sandbox().exec(code="print(1)").stdout == "1\n"  # closing `mine` did not close the pool it was given


def test_composite_passes_the_context_to_its_parts(ctx):
    counting = CountingSandbox(ctx.sandbox())
    code_part = add_task().verifier
    composite = {
        "type": "composite",
        "parts": [
            {"name": "tests", "weight": 0.5, "verifier": code_part},
            {"name": "again", "weight": 0.5, "verifier": code_part},
        ],
    }
    reward = score(add_task(composite), "    return a + b\n", VerifierContext(sandbox=counting))
    assert reward.value == 1.0 and counting.runs == 2


def test_an_owned_pool_opens_lazily_once_and_closes_with_the_context():
    context = VerifierContext(sandbox_size=2)
    assert score(Task(id="n", prompt="1+1?", verifier={"type": "numeric", "answer": "2"}), "2", context).value == 1.0
    pool = context.sandbox()
    assert isinstance(pool, SandboxPool) and context.sandbox() is pool and len(pool.uids) == 2
    context.close()
    context.close()  # idempotent
    with pytest.raises(VerifierContextClosed):
        context.sandbox()


def test_without_a_context_score_opens_and_closes_its_own():
    assert score(add_task(), "    return a + b\n").value == 1.0
    assert not any(isinstance(v, SandboxPool) for v in vars(code_module).values())  # no module-global pool


def test_sandbox_size_is_validated():
    with pytest.raises(ValueError, match="sandbox_size"):
        VerifierContext(sandbox_size=0)
