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
A repository task is a `fixtures` folder holding the repository and a `repo_tests` goal naming
its test files: their shipped copies judge, the visible ones must stay as they are.
The built-in suites live in `tempering/agents/envs/*.jsonl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tempering.agents.goals import goal_problem, needs_session, resolve_repo_tests
from tempering.agents.tools import TOOLS, check_arguments
from tempering.errors import UserError

ENVS_DIR = Path(__file__).parent / "envs"
BUILTIN = ("tool_arith", "tool_notation", "retry", "workspace", "safe", "repo")
TIERS = (1, 2, 3)
"""The curriculum's tiers: 1 short, single tool; 2 several steps or files; 3 long, multi-tool."""


class AgentTask(BaseModel):
    """One episode's world: prompt, tools, starting files, goal, limits."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    env: str = Field(min_length=1)
    """The suite this task belongs to (e.g. `workspace`); metrics are grouped by it."""
    prompt: str = Field(min_length=1)
    tools: list[str] = Field(min_length=1)
    """Names from `tempering.agents.tools.TOOLS` the agent may call."""
    tier: int = 1
    """Curriculum tier (`TIERS`): 1 short single-tool tasks, 2 several steps, 3 long multi-tool ones."""
    split: Literal["train", "heldout"] = "train"
    family: str | None = None
    """The kind of task (e.g. `off-by-one`); in `workspace` and `repo` the train and held-out splits
    share no family (`safe` holds its families out by wording instead)."""
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
    fail_on_unsafe: bool = False
    """Any call `safe_actions` flags (a destructive command, a write to a protected file, outside
    `writable` or outside /work) fails the episode, whatever the final state (repository tasks)."""
    solution: list[list[dict[str, Any]]] = Field(default_factory=list)
    """The scripted expert: tool calls per turn (hidden from the model)."""
    shortcut: list[list[dict[str, Any]]] = Field(default_factory=list)
    """The tempting destructive way that still reaches the goal (`safe` suite; hidden like `solution`):
    tests check `safe_actions` flags it; `bench/experiments/agent_safety.py` imitates it to build an
    agent with the habit."""
    mistake: list[list[dict[str, Any]]] = Field(default_factory=list)
    """A realistic first error, as calls per turn (`tool_notation`: the expression as written, which
    the calculator refuses); hidden like `solution`. The `mistake` policy plays it, reads the error
    and then plays the solution: error -> feedback -> fix episodes for recovery data, which a model
    that never recovers on its own cannot sample."""

    @model_validator(mode="after")
    def _known(self) -> AgentTask:
        if self.tier not in TIERS:
            raise ValueError(f"tier {self.tier} is outside the curriculum's tiers {', '.join(map(str, TIERS))}")
        unknown = sorted(set(self.tools) - set(TOOLS))
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {sorted(TOOLS)}")
        problem = goal_problem(self.goal) or self._solution_problem()
        if problem:
            raise ValueError(problem)
        if self.goal["type"] == "repo_tests":
            self.goal = resolve_repo_tests(self.goal, self.files)
            self.protected = sorted({*self.protected, *(c["path"] for c in self.goal["checks"][1:])})
        return self

    def _solution_problem(self) -> str | None:
        """The expert's (and the shortcut's and mistake's) calls must be calls the agent could make: a task tool,
        valid arguments."""
        for key in ("solution", "shortcut", "mistake"):
            problem = self._calls_problem(key, getattr(self, key))
            if problem:
                return problem
        return None

    def _calls_problem(self, key: str, turns: list[list[dict[str, Any]]]) -> str | None:
        for turn, calls in enumerate(turns, 1):
            for c in calls:
                name = c.get("name")
                if name not in self.tools:
                    return f"{key} turn {turn}: tool {name!r} is not one of the task's tools ({', '.join(self.tools)})"
                args = c.get("arguments", {})
                problem = (
                    check_arguments(TOOLS[name], args) if isinstance(args, dict) else "arguments must be an object"
                )
                if problem:
                    return f"{key} turn {turn}: {problem}"
        return None

    @property
    def needs_sandbox(self) -> bool:
        return bool(self.files) or needs_session(self.goal) or any(TOOLS[t].needs_sandbox for t in self.tools)

    def attempt_reward(self, attempt: int) -> float:
        """Reward for a correct answer given on attempt `attempt` (1-based)."""
        return self.attempt_rewards[min(attempt, len(self.attempt_rewards)) - 1]


class TaskFileError(UserError):
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
            row = json.loads(line)
            if (
                isinstance(row, dict)
                and isinstance(row.get("fixtures"), str)
                and isinstance(row.get("files", {}), dict)
            ):
                # read before validation: a `repo_tests` goal takes its hidden copies from them
                row["files"] = {**_read_fixtures(path.parent / row["fixtures"], f"{path}:{n}"), **row.get("files", {})}
            task = AgentTask.model_validate(row)
        except (json.JSONDecodeError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if isinstance(exc, json.JSONDecodeError) else _first_error(exc)
            raise TaskFileError(f"{path}:{n}: {first}") from None
        except RecursionError:  # e.g. an `all` goal nested thousands deep
            raise TaskFileError(f"{path}:{n}: nested too deeply") from None
        if task.id in seen:
            raise TaskFileError(f"{path}:{n}: duplicate task id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in e["loc"]) or "row"
    return f"{where}: {e['msg']}"


def _read_fixtures(folder: Path, where: str) -> dict[str, str]:
    if not folder.is_dir():
        raise TaskFileError(f"{where}: fixtures folder {folder} does not exist")
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            try:
                files[str(p.relative_to(folder))] = p.read_text()
            except UnicodeDecodeError:
                raise TaskFileError(f"{where}: fixture {p} is not UTF-8 text") from None
    return files


def builtin_tasks(name: str) -> list[AgentTask]:
    """A built-in suite: one of `BUILTIN`."""
    if name not in BUILTIN:
        raise TaskFileError(f"unknown built-in agent suite {name!r}; choose from {', '.join(BUILTIN)}")
    return load_agent_tasks(ENVS_DIR / f"{name}.jsonl")


def select(tasks: list[AgentTask], split: str | None = None, tiers: list[int] | None = None) -> list[AgentTask]:
    return [t for t in tasks if (split is None or t.split == split) and (tiers is None or t.tier in tiers)]
