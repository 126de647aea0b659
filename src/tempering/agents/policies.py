"""Scripted policies: what validates the harness before any model is trusted with it.

    oracle   the task's `solution`, turn by turn (must solve every task)
    noop     answers "I cannot do this." at once (must solve ~none)
    random   random calls to the task's tools with random arguments, malformed calls and
             random number guesses (must solve ~none)
    recover  one malformed call first, then the oracle (must solve all, counted as recoveries)

A policy maps the conversation so far to the next assistant text, exactly what a model
would write (tool calls in the `<tool_call>{json}</tool_call>` form), so scripted episodes
run through the same `Environment.step` as sampled ones. The oracle's turns are also the
expert trajectories of agent SFT.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Protocol

from tempering.agents.tasks import AgentTask
from tempering.data.toolcalls import append_tool_calls, format_tool_call

MALFORMED = '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"</tool_call>'
"""A call whose JSON is cut off (what a small model often writes)."""


class Policy(Protocol):
    def __call__(self, task: AgentTask, messages: list[dict[str, Any]]) -> str: ...


def _turn(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant")


def oracle_text(task: AgentTask, turn: int) -> str:
    """The expert's text for turn `turn` (0-based): its calls, one per line."""
    return append_tool_calls(None, task.solution[turn]) if turn < len(task.solution) else "Done."


def oracle(task: AgentTask, messages: list[dict[str, Any]]) -> str:
    return oracle_text(task, _turn(messages))


def noop(task: AgentTask, messages: list[dict[str, Any]]) -> str:
    return "I cannot do this."


def scripted(calls: list[tuple[str, dict[str, Any]]], answer: str = "done") -> Policy:
    """One turn of `calls` (tool name, arguments), then `submit` `answer`: an attack or a fix
    played exactly as written (the attack tests and diagnostics)."""

    def act(task: AgentTask, messages: list[dict[str, Any]]) -> str:
        todo = calls if _turn(messages) == 0 else [("submit", {"answer": answer})]
        return "\n".join(format_tool_call(name, args) for name, args in todo)

    return act


def recover(task: AgentTask, messages: list[dict[str, Any]]) -> str:
    turn = _turn(messages)
    return MALFORMED if turn == 0 else oracle_text(task, turn - 1)


def mistake_turns(task: AgentTask) -> list[str]:
    """The task's scripted mistake as assistant texts (the opening turns of a recovery probe)."""
    return [append_tool_calls(None, calls) for calls in task.mistake]


def mistake(task: AgentTask, messages: list[dict[str, Any]]) -> str:
    """The task's scripted `mistake` turns, then the expert's: an error, its feedback, the fix."""
    turn, scripted = _turn(messages), mistake_turns(task)
    return scripted[turn] if turn < len(scripted) else oracle_text(task, turn - len(scripted))


_WORDS = ["ls", "cat notes.txt", "x", "data.csv", "print(1)", "42", "7 * 9", "out.txt", "rm -f nothing", "echo hi"]


def random_policy(seed: int = 0) -> Policy:
    """A policy that acts at random (seeded): calls, malformed calls, guesses."""
    rng = random.Random(seed)

    def act(task: AgentTask, messages: list[dict[str, Any]]) -> str:
        roll = rng.random()
        if roll < 0.15:
            return MALFORMED
        if roll < 0.3:
            return f"The answer is {rng.randrange(10**6)}."
        from tempering.agents.tools import TOOLS

        name = rng.choice(task.tools)
        props = TOOLS[name].parameters["properties"]
        args = {k: rng.choice(_WORDS) for k in props}
        if name == "submit":
            args = {"answer": str(rng.randrange(10**6))}
        return format_tool_call(name, args)

    return act


POLICIES: dict[str, Callable[[int], Policy]] = {
    "oracle": lambda seed: oracle,
    "noop": lambda seed: noop,
    "recover": lambda seed: recover,
    "mistake": lambda seed: mistake,
    "random": random_policy,
}
