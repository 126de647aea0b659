"""Agent tasks as data: one JSONL row per task, fixture files inline or in a folder beside it.

    {"id": "ws-t1-count-03", "env": "workspace", "tier": 1, "split": "train",
     "prompt": "How many lines do the Python files here have in total? ...",
     "tools": ["shell", "read_file", "submit"],
     "files": {"a.py": "...", "pkg/b.py": "..."},          # or "fixtures": "dir/next/to/the/jsonl"
     "goal": {"type": "answer", "value": "42"},            # checked on the final state
     "solution": [[{"name": "shell", "arguments": {"cmd": "cat *.py | wc -l"}}], ...]}

An environment is nothing but such rows: the tools they allow, the files they start with,
the goal, and the attempt rule (`attempts` > 1 with `attempt_rewards`: the retry
environment). `solution` holds a scripted expert's tool calls turn by turn (the oracle
policy and agent SFT use it); like the goal, it is hidden material never shown to the model.
The built-in suites live in `tempering/agents/envs/*.jsonl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tempering.agents.goals import goal_problem, needs_session
from tempering.agents.tools import TOOLS

ENVS_DIR = Path(__file__).parent / "envs"
BUILTIN = ("tool_arith", "retry", "workspace", "safe")


class AgentTask(BaseModel):
    """One episode's world: prompt, tools, starting files, goal, limits."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    env: str = Field(min_length=1)
    """The suite this task belongs to (e.g. `workspace`); metrics are grouped by it."""
    prompt: str = Field(min_length=1)
    tools: list[str] = Field(min_length=1)
    """Names from `tempering.agents.tools.TOOLS` the agent may call."""
    tier: int = Field(default=1, ge=1)
    """Curriculum tier: 1 short single-tool tasks, higher = longer, more tools."""
    split: Literal["train", "heldout"] = "train"
    files: dict[str, str] = Field(default_factory=dict)
    """Starting files of /work (relative path -> text)."""
    fixtures: str | None = None
    """A folder (relative to the JSONL file) whose files are added to `files` on load."""
    goal: dict[str, Any]
    """The programmatic check of the final state (see `tempering.agents.goals`)."""
    protected: list[str] = Field(default_factory=list)
    """Files that must be left as they were (the `intact` metric; `safe_actions` flags writes to them)."""
    writable: list[str] | None = None
    """Glob patterns (relative to /work) `write_file` may write; None: anywhere but `protected`."""
    max_steps: int = Field(default=8, ge=1)
    """Model turns before the episode ends unsolved."""
    attempts: int = Field(default=1, ge=1)
    """Answers the agent may give; a wrong one with attempts left gets feedback (retry)."""
    attempt_rewards: list[float] = Field(default_factory=lambda: [1.0])
    """Reward for a correct answer on attempt 1, 2, ...; the last value repeats."""
    solution: list[list[dict[str, Any]]] = Field(default_factory=list)
    """The scripted expert: tool calls per turn (hidden from the model)."""

    @model_validator(mode="after")
    def _known(self) -> AgentTask:
        unknown = sorted(set(self.tools) - set(TOOLS))
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {sorted(TOOLS)}")
        problem = goal_problem(self.goal)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def needs_sandbox(self) -> bool:
        return bool(self.files) or needs_session(self.goal) or any(TOOLS[t].needs_sandbox for t in self.tools)

    def attempt_reward(self, attempt: int) -> float:
        """Reward for a correct answer given on attempt `attempt` (1-based)."""
        return self.attempt_rewards[min(attempt, len(self.attempt_rewards)) - 1]


class TaskFileError(ValueError):
    """A task file is missing or a row is invalid (the message names file and line)."""


def load_agent_tasks(path: str | Path) -> list[AgentTask]:
    """Read and validate a task JSONL; fixture folders are read in. Raises TaskFileError."""
    import json

    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"{path}: no such task file")
    tasks, seen = [], set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = AgentTask.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if isinstance(exc, json.JSONDecodeError) else _first_error(exc)
            raise TaskFileError(f"{path}:{n}: {first}") from None
        except RecursionError:  # e.g. an `all` goal nested thousands deep
            raise TaskFileError(f"{path}:{n}: nested too deeply") from None
        if task.id in seen:
            raise TaskFileError(f"{path}:{n}: duplicate task id {task.id!r}")
        seen.add(task.id)
        if task.fixtures:
            task.files = {**_read_fixtures(path.parent / task.fixtures, f"{path}:{n}"), **task.files}
        tasks.append(task)
    return tasks


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in e["loc"]) or "row"
    return f"{where}: {e['msg']}"


def _read_fixtures(folder: Path, where: str) -> dict[str, str]:
    if not folder.is_dir():
        raise TaskFileError(f"{where}: fixtures folder {folder} does not exist")
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def builtin_tasks(name: str) -> list[AgentTask]:
    """A built-in suite: `tool_arith`, `retry` or `workspace`."""
    if name not in BUILTIN:
        raise TaskFileError(f"unknown built-in agent suite {name!r}; choose from {', '.join(BUILTIN)}")
    return load_agent_tasks(ENVS_DIR / f"{name}.jsonl")


def load_agent_suite(name: str) -> list[AgentTask]:
    """A built-in suite by name, or a task JSONL path."""
    return builtin_tasks(name) if name in BUILTIN else load_agent_tasks(name)


def select(tasks: list[AgentTask], split: str | None = None, tiers: list[int] | None = None) -> list[AgentTask]:
    return [t for t in tasks if (split is None or t.split == split) and (tiers is None or t.tier in tiers)]
