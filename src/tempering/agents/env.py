"""The environment protocol, the registry of environment classes, and `ToolEnv` (every built-in suite is data).

    env = ToolEnv(sandbox)                      # a `Sandbox`; None for suites that need none
    observation = env.reset(task)               # messages the episode starts with
    observation, reward, done, info = env.step(assistant_text)
    env.close()

A step reads the assistant's text with the template's tool-call parser
(`tempering.data.toolcalls`), runs each call, and answers with one `tool` message per call.
What goes wrong is counted and answered, never raised:

  * a malformed call (bad JSON, no name), an unknown tool or arguments that fail the tool's
    schema -> an `error: ...` tool message and `invalid_calls += 1` (minus
    `invalid_call_penalty` on that step's reward); the episode goes on;
  * a tool that runs and fails (nonzero exit, missing file) -> its output, `tool_errors += 1`;
  * a wrong answer with attempts left -> a user message saying so (the retry suite);
  * a call the sandbox cannot take (a NUL byte in an argument, a tool call nested past
    the parser's depth, a program that no longer fits in a full /work) -> likewise an
    `error: ...` message, never an exception.

The episode ends on `submit`, on a turn without tool calls (its text is the answer), or
after `task.max_steps` turns; the goal is then checked on the final state and the last
step's reward is `task.attempt_reward(attempt)` on success, else 0 (a graded goal, a Harbor
task's verifier, scales it by its reward: partial credit kept). When the sandbox itself
fails (it cannot open, a run reports `sandbox_error`), or anything unforeseen raises while
a turn is answered, that episode alone ends with `info["status"] == "env_error"` and the
reason in `info["error"]`: the environment's failure, never the model's, and never an
exception out of `step` (so one episode cannot end a rollout of many).

An environment class is one registration carrying its own settings (a `config.Options`
subclass, written flat in a config's `episode:` beside `environment: NAME`), with no edit
elsewhere; `agent_rollout` builds every episode's environment through `make_environment`:

    class CountdownSettings(Options):
        start: int = 3

    @register_environment("countdown", CountdownSettings)
    class CountdownEnv:                         # an `Environment`
        def __init__(self, sandbox, settings: CountdownSettings): ...

Each episode has its own `SandboxSession`: a /work that persists across steps and is
discarded when the episode ends (whatever ended it), at the next `reset` or at `close`, so
no episode sees another's files or processes and none leaves a mount or cgroup behind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, NamedTuple, Protocol

from pydantic import Field

from tempering.agents.goals import check_goal
from tempering.agents.safe_actions import unsafe_reason
from tempering.agents.tasks import AgentTask
from tempering.agents.tools import TOOLS, EnvFailure, ToolContext, _session, check_arguments
from tempering.config import Options
from tempering.data.toolcalls import parse_tool_calls
from tempering.errors import UserError
from tempering.sandbox.base import Limits, Sandbox

Observation = list[dict[str, Any]]
"""Messages the environment adds to the conversation (`tool` results, `user` feedback)."""


class StepResult(NamedTuple):
    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any]


class Environment(Protocol):
    """A multi-turn world. `reset` starts an episode of `task`; `step` answers one assistant turn;
    `stats` is what the episode did so far (the rollout reads its counters after each step)."""

    stats: EpisodeStats

    def reset(self, task: AgentTask) -> Observation: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


@dataclass
class EpisodeStats:
    """What one episode did; `info` of the final step carries it (`asdict`)."""

    steps: int = 0
    invalid_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    wrong_answers: int = 0
    attempts: int = 0
    success: bool = False
    intact: bool = True
    """Protected files are as they started."""
    unsafe_actions: int = 0
    """Tool calls `safe_actions` judged destructive or writing outside the allowed paths."""
    unsafe_reasons: list[str] = field(default_factory=list)
    """Why, one line per unsafe call."""
    sandbox_s: float = 0.0
    sandbox_timeouts: int = 0
    status: str = "scored"
    """"scored", or "env_error" when the environment failed."""
    error: str = ""
    flags: list[str] = field(default_factory=list)
    """`cheat:` flags of the goal check (e.g. `cheat:comparison_override`: a result equal to everything)."""

    @property
    def errors(self) -> int:
        return self.invalid_calls + self.tool_errors + self.wrong_answers

    @property
    def recovered(self) -> bool:
        """Succeeded after at least one error (invalid call, failed tool run, wrong answer)."""
        return self.success and self.errors > 0


EnvironmentFactory = Callable[[Any, Any], Environment]
"""`factory(sandbox, settings) -> Environment`: a registered class, or a function building one."""


@dataclass(frozen=True)
class EnvironmentKind:
    name: str
    factory: EnvironmentFactory
    settings: type[Options]


ENVIRONMENTS: dict[str, EnvironmentKind] = {}
"""Every environment class by name (`episode.environment` in a config)."""


def register_environment(name: str, settings: type[Options] = Options) -> Callable[[Any], Any]:
    """Register `factory(sandbox, settings) -> Environment` (an environment class whose
    constructor takes the two) as `name`, with its own settings class.

    Raises:
        UserError: the name is taken.
    """
    if name in ENVIRONMENTS:
        raise UserError(f"environment {name!r} is registered twice")

    def decorate(factory: Any) -> Any:
        ENVIRONMENTS[name] = EnvironmentKind(name, factory, settings)
        return factory

    return decorate


def make_environment(name: str, sandbox: Any, settings: Options) -> Environment:
    """A new environment of the registered kind `name` (`settings`: its own, or the base: defaults)."""
    kind = ENVIRONMENTS[name]
    return kind.factory(sandbox, settings if isinstance(settings, kind.settings) else kind.settings())


class ToolEnvSettings(Options):
    """The `tool` environment's own settings (`ToolEnv`)."""

    invalid_call_penalty: float = Field(default=0.0, ge=0)
    """Subtracted from a turn's reward per malformed/unknown/invalid tool call."""
    unsafe_action_penalty: float = Field(default=0.0, ge=0)
    """The `safe_actions` component: subtracted from a turn's reward per destructive tool call or
    write outside the task's allowed paths (`agents.safe_actions`); counted per episode either way."""


class ToolEnv:
    """`Environment` over `AgentTask` rows: tools from `TOOLS`, files and goal from the task.

    Args:
        sandbox: where episodes' sessions open (tasks that need none run without it).
        limits: per-call limits inside the session (default: the sandbox's).
        invalid_call_penalty: subtracted from a step's reward per invalid call.
        unsafe_action_penalty: subtracted from a step's reward per unsafe call (`safe_actions`:
            destructive, or a write outside the allowed paths); the call still runs.
    """

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        limits: Limits | None = None,
        invalid_call_penalty: float = 0.0,
        unsafe_action_penalty: float = 0.0,
    ):
        self.sandbox, self.limits, self.invalid_call_penalty = sandbox, limits, invalid_call_penalty
        self.unsafe_action_penalty = unsafe_action_penalty
        self.task: AgentTask | None = None
        self.ctx = ToolContext(session=None)
        self.stats = EpisodeStats()
        self.done = True
        self._initial: dict[str, str] = {}

    def reset(self, task: AgentTask) -> Observation:
        """Start an episode: a fresh session with the task's files. Raises EnvFailure if it cannot open."""
        self.close()
        self.task, self.stats, self.done = task, EpisodeStats(), False
        self.ctx = ToolContext(session=None, limits=self.limits)
        if task.needs_sandbox:
            if self.sandbox is None:
                raise EnvFailure(f"task {task.id} needs a sandbox and the environment has none")
            try:
                self.ctx.session = self.sandbox.session(self.limits)
                self.ctx.session.write_files(task.files)
            except Exception as exc:  # e.g. files larger than the scratch: close what was opened
                self.close()
                raise EnvFailure(f"cannot open the episode's sandbox: {_one_line(exc)}") from exc
        self._initial = {p: task.files[p] for p in task.protected if p in task.files}
        return [{"role": "user", "content": task.prompt}]

    def step(self, action: str) -> StepResult:
        """Answer one assistant turn. Never raises for what the turn or the sandbox did.

        What the model got wrong is an `error: ...` observation (see the module docstring);
        anything else that fails, foreseen (`EnvFailure`) or not, ends this episode alone
        with status `env_error` and the reason in `info["error"]`. The session is closed
        whenever the episode ends, whatever ended it.
        """
        task = self.task
        if self.done or task is None:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.stats.steps += 1
        observation: Observation = []
        reward = 0.0
        try:
            observation, reward, answered = self._act(action, task)
            if not self.done and not answered and self.stats.steps >= task.max_steps:
                reward += self._finish(None, task)
        except Exception as exc:  # the one choke point: no episode's failure reaches the rollout
            self.done, self.stats.status, self.stats.error = True, "env_error", _one_line(exc)
            observation, reward = [], 0.0
        finally:
            if self.done:
                self._close_session()
        info: dict[str, Any] = {"step": self.stats.steps}
        if self.done:
            self.stats.sandbox_s, self.stats.sandbox_timeouts = self.ctx.sandbox_s, self.ctx.sandbox_timeouts
            info.update(asdict(self.stats), recovered=self.stats.recovered, errors=self.stats.errors)
        return StepResult(observation, reward, self.done, info)

    def close(self) -> None:
        self._close_session()
        self.done = True

    # --- one turn ---

    def _act(self, action: str, task: AgentTask) -> tuple[Observation, float, bool]:
        parsed = parse_tool_calls(action)
        obs: Observation = []
        reward = 0.0
        for error in parsed.errors:
            obs.append(
                self._invalid(f'{error}. Write calls as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>.')
            )
        answered = False
        for call in parsed.calls:
            if self.done:
                break
            name, args = call["name"], call["arguments"]
            tool = TOOLS.get(name) if name in task.tools else None
            if tool is None:
                obs.append(self._invalid(f"unknown tool {name!r}; available: {', '.join(task.tools)}"))
                continue
            problem = check_arguments(tool, args)
            if problem:
                obs.append(self._invalid(problem))
                continue
            self.stats.tool_calls += 1
            unsafe = unsafe_reason(name, args, task)
            if unsafe is not None:
                self.stats.unsafe_actions += 1
                self.stats.unsafe_reasons.append(unsafe)
                reward -= self.unsafe_action_penalty
            outcome = tool.run(args, self.ctx)
            self.stats.tool_errors += outcome.error
            obs.append({"role": "tool", "name": name, "content": outcome.text})
            if outcome.done:
                answered = True
                reward += self._answer(self.ctx.submitted[-1], obs, task)
        if not parsed.calls and not parsed.errors:
            answered = True
            reward += self._answer(parsed.content, obs, task)
        reward -= self.invalid_call_penalty * len([m for m in obs if m.get("invalid")])
        for m in obs:
            m.pop("invalid", None)
        return obs, reward, answered

    def _invalid(self, text: str) -> dict[str, Any]:
        self.stats.invalid_calls += 1
        return {"role": "tool", "name": "error", "content": f"error: {text}", "invalid": True}

    def _answer(self, answer: str, obs: Observation, task: AgentTask) -> float:
        """An answer was given (submit, or a turn without calls): check it, or give feedback."""
        self.stats.attempts += 1
        if task.goal["type"] == "answer" and self.stats.attempts < task.attempts:
            if check_goal(task.goal, self.ctx, answer):
                return self._finish(answer, task)
            self.stats.wrong_answers += 1
            left = task.attempts - self.stats.attempts
            obs.append(
                {
                    "role": "user",
                    "content": f"That is not correct. Try again ({left} attempt{'s' if left > 1 else ''} left).",
                }
            )
            return 0.0
        return self._finish(answer, task)

    def _finish(self, answer: str | None, task: AgentTask) -> float:
        self.done = True
        self.stats.intact = self._intact()  # before the goal: a `script` goal may write files
        self.stats.success = check_goal(task.goal, self.ctx, answer)
        self.stats.flags = sorted(set(self.ctx.flags))
        if task.fail_on_unsafe and self.stats.unsafe_actions:  # e.g. a repository task's tests touched
            self.stats.success = False
            return 0.0
        full = task.attempt_reward(max(self.stats.attempts, 1))
        if self.ctx.reward is not None:  # a graded goal (a Harbor task): its reward, partial credit kept
            return full * self.ctx.reward
        return full if self.stats.success else 0.0

    def _intact(self) -> bool:
        if not self._initial:
            return True
        return all(
            (_session(self.ctx).read_file(p) or b"").decode("utf-8", "replace") == text
            for p, text in self._initial.items()
        )

    def _close_session(self) -> None:
        if self.ctx.session is not None:
            session, self.ctx.session = self.ctx.session, None
            try:
                session.close()
            except Exception as exc:  # the sandbox could not release it: this episode's failure alone
                self.stats.status, self.stats.error = "env_error", f"cannot close the sandbox: {_one_line(exc)}"


@register_environment("tool", ToolEnvSettings)
def _tool_env(sandbox: Any, settings: ToolEnvSettings) -> ToolEnv:
    return ToolEnv(
        sandbox,
        invalid_call_penalty=settings.invalid_call_penalty,
        unsafe_action_penalty=settings.unsafe_action_penalty,
    )


def _one_line(exc: Exception) -> str:
    """`EnvFailure`'s own message; any other exception with its type (it was not foreseen)."""
    text = str(exc) if isinstance(exc, EnvFailure) else f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:500] if text.strip() else type(exc).__name__
