"""Goal checks: did the episode leave the world in the wanted state? (Never read from the transcript.)

{"type": "answer", "value": "4181"}                     the submitted answer (numbers compared as numbers)
{"type": "file", "path": "out.csv", "equals": "..."}    a file's content (trailing whitespace ignored)
{"type": "tests", "files": {"test_calc.py": "..."}}     every test of hidden unittest files passes
{"type": "script", "files": {"run.py": "..."}}          hidden Python programs run to their end in /work
{"type": "all", "checks": [...]}                        every check passes, in order
{"type": "repo_tests", "paths": ["tests/test_a.py"]}     a repository task: see `resolve_repo_tests`
{"type": "harbor_tests", "tests": {"test.sh": "..."}}    a Harbor task's verifier: its reward (see `harbor_judge`)

`tests` and `script` are judged by `tempering.agents.judge`: the hidden files never touch
/work, run under an interpreter and sys.path the episode cannot change, and the verdict is
the judge's own report, never an exit status of code the agent wrote. `file` is read by
the host without following links. Goals are checked by `goal_problem` when a task loads.

A goal kind is one registration: its keys as a pydantic model (checked when a task loads) and
the check over the final state, with no edit elsewhere:

    class CountGoal(GoalSettings):
        path: str
        lines: int

    @register_goal("line_count", CountGoal)
    def _line_count(goal: CountGoal, ctx: ToolContext, answer: str | None) -> bool: ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from tempering.agents.harbor_judge import run_harbor_tests
from tempering.agents.judge import judge
from tempering.agents.tools import EnvFailure, ToolContext
from tempering.errors import UserError
from tempering.numbers import as_number, parse_number
from tempering.pyast import parse_module


class GoalSettings(BaseModel):
    """The keys of one goal kind (besides `type`); a registered kind subclasses it."""

    model_config = ConfigDict(extra="allow", frozen=True)


GoalCheck = Callable[[Any, ToolContext, "str | None"], bool]


@dataclass(frozen=True)
class GoalKind:
    """One registered goal kind: its keys, its check, and whether the check reads the sandbox."""

    name: str
    settings: type[GoalSettings]
    check: GoalCheck
    needs_session: bool = True


GOALS: dict[str, GoalKind] = {}
"""Every goal kind by its `type`."""


def register_goal(
    name: str, settings: type[GoalSettings], needs_session: bool = True
) -> Callable[[GoalCheck], GoalCheck]:
    """Register `check(goal: settings, ctx, answer) -> bool` as the goal kind `name`.

    `needs_session=False`: the check reads only the answer (an episode of such a goal, with no
    files and no sandboxed tool, runs without a sandbox).

    Raises:
        UserError: the name is taken.
    """
    if name in GOALS:
        raise UserError(f"goal type {name!r} is registered twice")

    def decorate(check: GoalCheck) -> GoalCheck:
        GOALS[name] = GoalKind(name, settings, check, needs_session)
        return check

    return decorate


def answer_correct(goal: dict[str, Any], answer: str | None) -> bool:
    """A number goal: the answer's last number has the same value (`4181.00` is `4181`, `1/2`
    is `0.5`, as the `numeric` verifier judges); any other goal: the same stripped text."""
    if answer is None:
        return False
    want = str(goal["value"]).strip()
    value = as_number(want)
    if value is None:
        return answer.strip() == want
    return parse_number(answer) == value


def goal_problem(goal: Any) -> str | None:
    """None for a well-formed goal, else one line saying what is wrong with it."""
    if not isinstance(goal, dict) or not isinstance(goal.get("type"), str):
        return "goal needs a string 'type'"
    kind = goal["type"]
    if kind == "command":
        return (
            "goal type 'command' is gone (its verdict was an exit status the agent could fake); use 'tests' or 'script'"
        )
    if kind not in GOALS:
        return f"unknown goal type {kind!r} ({', '.join(GOALS)})"
    try:
        _settings(goal)
    except ValidationError as exc:
        missing = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing"]
        if missing:
            return f"goal {kind!r} needs {', '.join(map(repr, missing))}"
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return None


def _settings(goal: dict[str, Any]) -> GoalSettings:
    return GOALS[goal["type"]].settings.model_validate({k: v for k, v in goal.items() if k != "type"})


def _relative(path: Any) -> bool:
    return isinstance(path, str) and "\0" not in path and all(p not in ("", ".", "..") for p in path.split("/"))


def _hidden_files_problem(kind: str, files: Any) -> str | None:
    if not isinstance(files, dict) or not files:
        return f"goal {kind!r} needs 'files': a non-empty object of name -> Python source"
    for name, source in files.items():
        # test files become modules named after them; a script's name is what tracebacks show
        if not (name.endswith(".py") and name[:-3].isidentifier()) or not isinstance(source, str):
            return f"goal {kind!r}: {name!r} must be a file name like 'test_calc.py' with Python source"
    return None


def _repo_tests_problem(goal: dict[str, Any]) -> str | None:
    paths = goal.get("paths")
    if not isinstance(paths, list) or not paths:
        return "goal 'repo_tests' needs 'paths': a non-empty list of the repository's test files (the hidden copies)"
    names = [p.rsplit("/", 1)[-1] if isinstance(p, str) else "" for p in paths]
    for path, name in zip(paths, names):
        if not (_relative(path) and name.endswith(".py") and name[:-3].isidentifier()):
            return f"goal 'repo_tests': {path!r} must be a relative path to a test file like 'tests/test_calc.py'"
    if len(set(names)) < len(names):
        return "goal 'repo_tests': two test files share a file name (the hidden copies are named after them)"
    return None


def resolve_repo_tests(goal: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """The checks a `repo_tests` goal stands for, given the repository's starting `files`.

    A repository task ships its tests twice: the visible copies in /work (for the agent to
    read and run) and, hidden, the same files as they were shipped. The goal is met when
    every hidden test passes against the final /work (`tests`, judged by `judge.py`) *and*
    every visible test file is still there as shipped (`file`; trailing whitespace aside):
    editing or deleting the tests never helps, and an agent that does either fails the task
    even with the right fix. Raises ValueError (one line) when a path is not a repository
    file, is not Python, or holds no test.
    """
    import ast

    hidden = {}
    for path in goal["paths"]:
        if path not in files:
            raise UserError(f"goal 'repo_tests': {path} is not a file of the repository (no hidden test)")
        try:
            tree = parse_module(files[path], path)
        except SyntaxError as exc:
            raise UserError(f"goal 'repo_tests': {path} is not valid Python (line {exc.lineno})") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name.startswith("test") for n in ast.walk(tree)):
            raise UserError(f"goal 'repo_tests': {path} defines no test (no method named test*)")
        hidden[path.rsplit("/", 1)[-1]] = files[path]
    intact = [{"type": "file", "path": p, "equals": files[p]} for p in goal["paths"]]
    return {"type": "all", "checks": [{"type": "tests", "files": hidden}, *intact]}


def needs_session(goal: dict[str, Any]) -> bool:
    """Whether checking `goal` reads the episode's sandbox (every kind registered so; `all` if any part does)."""
    if goal["type"] == "all":
        return any(needs_session(g) for g in goal["checks"])
    return GOALS[goal["type"]].needs_session


def check_goal(goal: dict[str, Any], ctx: ToolContext, answer: str | None) -> bool:
    """Whether the final state meets `goal`. Raises EnvFailure when the sandbox fails the check
    itself (or a kind that reads it has no session), UserError for an unknown goal type and
    ValueError, with goal_problem's one line, for settings the load would have refused."""
    kind = GOALS.get(goal["type"])
    if kind is None:
        raise UserError(f"unknown goal type {goal['type']!r} ({', '.join(GOALS)})")
    if kind.needs_session and goal["type"] != "all" and ctx.session is None:
        raise EnvFailure(f"goal {kind.name!r} needs a sandbox session")
    try:
        settings = _settings(goal)
    except ValidationError:
        # a goal that skipped the check at load (a model_copy, a plugin's task): one line, as a load would say
        raise ValueError(goal_problem(goal)) from None
    return kind.check(settings, ctx, answer)


# ------------------------------------------------------------------ the built-in kinds
class AnswerGoal(GoalSettings):
    value: Any
    """The wanted answer (numbers compared as numbers)."""


@register_goal("answer", AnswerGoal, needs_session=False)
def _answer(goal: AnswerGoal, ctx: ToolContext, answer: str | None) -> bool:
    return answer_correct({"value": goal.value}, answer)


class FileGoal(GoalSettings):
    path: Any
    """The file, relative to /work."""
    equals: Any
    """Its wanted content (trailing whitespace ignored)."""

    @field_validator("path")
    @classmethod
    def _under_work(cls, path: Any) -> Any:
        if not _relative(path):
            raise ValueError(f"goal 'file': path must be relative to /work, without '..' or empty parts: {path!r}")
        return path


@register_goal("file", FileGoal)
def _file(goal: FileGoal, ctx: ToolContext, answer: str | None) -> bool:
    assert ctx.session is not None
    data = ctx.session.read_file(goal.path)
    return data is not None and data.decode("utf-8", "replace").rstrip() == str(goal.equals).rstrip()


class HiddenFilesGoal(GoalSettings):
    files: Any
    """Hidden Python files: name -> source."""

    @field_validator("files")
    @classmethod
    def _python_files(cls, files: Any) -> Any:
        problem = _hidden_files_problem(cls.kind, files)
        if problem:
            raise ValueError(problem)
        return files

    kind: ClassVar[str] = ""


class TestsGoal(HiddenFilesGoal):
    kind = "tests"


class ScriptGoal(HiddenFilesGoal):
    kind = "script"


def _judged(tests: dict[str, str] | None, scripts: dict[str, str] | None, ctx: ToolContext) -> bool:
    assert ctx.session is not None
    verdict = judge(ctx.session, tests=tests, scripts=scripts, limits=ctx.limits)
    ctx.sandbox_s += verdict.run.wall_s
    ctx.flags.extend(verdict.flags)
    if verdict.run.status == "sandbox_error":
        raise EnvFailure(f"sandbox error in the goal check: {verdict.run.error}")
    return verdict.passed


@register_goal("tests", TestsGoal)
def _tests(goal: TestsGoal, ctx: ToolContext, answer: str | None) -> bool:
    return _judged(goal.files, None, ctx)


@register_goal("script", ScriptGoal)
def _script(goal: ScriptGoal, ctx: ToolContext, answer: str | None) -> bool:
    return _judged(None, goal.files, ctx)


class AllGoal(GoalSettings):
    checks: Any
    """Goals that must all pass, in order."""

    @field_validator("checks")
    @classmethod
    def _each_a_goal(cls, checks: Any) -> Any:
        if not isinstance(checks, list) or not checks:
            raise ValueError("goal 'all' needs a non-empty list 'checks'")
        problem = next((p for p in map(goal_problem, checks) if p), None)
        if problem:
            raise ValueError(problem)
        return checks


@register_goal("all", AllGoal)
def _all(goal: AllGoal, ctx: ToolContext, answer: str | None) -> bool:
    return all(check_goal(g, ctx, answer) for g in goal.checks)


class RepoTestsGoal(GoalSettings):
    paths: Any
    """The repository's test files (the hidden copies judge; see `resolve_repo_tests`)."""

    @field_validator("paths")
    @classmethod
    def _test_files(cls, paths: Any) -> Any:
        problem = _repo_tests_problem({"paths": paths})
        if problem:
            raise ValueError(problem)
        return paths


@register_goal("repo_tests", RepoTestsGoal)
def _repo_tests(goal: RepoTestsGoal, ctx: ToolContext, answer: str | None) -> bool:
    raise ValueError("goal 'repo_tests' is resolved when its task loads (AgentTask), never checked as such")


class HarborTestsGoal(GoalSettings):
    tests: Any
    """The task's tests/ folder: relative path -> text (Harbor's paths rewritten, `harbor.map_paths`)."""
    script: Any = "test.sh"
    """The verifier script among `tests`."""
    timeout_s: Any = 60.0
    """The task's `[verifier] timeout_sec`."""
    env: Any = {}
    """The task's `[verifier] env`."""

    @field_validator("tests")
    @classmethod
    def _text_files(cls, tests: Any) -> Any:
        if (
            not isinstance(tests, dict)
            or not tests
            or not all(_relative(k) and isinstance(v, str) for k, v in tests.items())
        ):
            raise ValueError("goal 'harbor_tests' needs 'tests': a non-empty object of relative path -> text")
        return tests

    @model_validator(mode="after")
    def _script_is_a_test_file(self) -> HarborTestsGoal:
        if self.script not in self.tests:
            raise ValueError(f"goal 'harbor_tests': the script {self.script!r} is not among its tests")
        if not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s < math.inf:
            raise ValueError(f"goal 'harbor_tests': timeout_s must be a positive number, got {self.timeout_s!r}")
        if not isinstance(self.env, dict) or not all(isinstance(v, str) for v in self.env.values()):
            raise ValueError("goal 'harbor_tests': env must be an object of name -> text")
        return self


@register_goal("harbor_tests", HarborTestsGoal)
def _harbor_tests(goal: HarborTestsGoal, ctx: ToolContext, answer: str | None) -> bool:
    """Met when Harbor's reward is at least 1; the reward itself (partial credit kept) is the
    episode's graded reward (`ctx.reward`), 0 when the run left no valid one."""
    assert ctx.session is not None
    verdict = run_harbor_tests(
        ctx.session,
        tests=goal.tests,
        script=goal.script,
        env=goal.env,
        timeout_s=float(goal.timeout_s),
        limits=ctx.limits,
    )
    ctx.sandbox_s += verdict.run.wall_s
    if verdict.run.status == "sandbox_error":
        raise EnvFailure(f"sandbox error in the goal check: {verdict.run.error}")
    ctx.reward = 0.0 if verdict.reward is None else verdict.reward
    return ctx.reward >= 1.0
