"""The multi-turn rollout: tasks + an engine -> token-exact agent trajectories.

    batch = agent_rollout(tasks, engine, renderer, sandbox, sampling, EpisodeSettings(), n=4, seed=0)
    batch.groups[i][j].trajectory      # task i, episode j: ids, loss mask, log-probs, per-turn rewards
    batch.groups[i][j].stats           # EpisodeStats: success, steps, invalid calls, recovery, ...
    batch.times                        # seconds in generation, environment (sandbox) and rendering

The second implementation of the rollout signature (the single-turn one is
`tempering.rollout.rollout`). Each round generates one turn for every live episode in one
`engine.generate` call, then steps their environments on a thread pool.

Token-in/token-out: an episode's ids are the opening prompt, then for each turn exactly the
ids the engine sampled (loss mask 1, their sampling log-probs kept), then the ids the
environment inserts (`AgentRenderer.observation_ids`, mask 0). The engine is always
prompted with the episode's ids so far, so the trained ids are the sampled ids and the
context they were sampled in; nothing is re-rendered from messages.

Ends: the environment says done; a turn is cut by `max_new_tokens` ("length": the turn is
masked out, or kept and the episode rewarded `-truncation_penalty`, by
`truncated_turns`); or the context budget cannot hold the next observation and a minimal
turn ("context": ends cleanly, unsolved, nothing cut mid-turn). A sandbox failure ends the
episode with status `env_error` (never a model failure; trainers drop such groups).

`opening_turns` plays scripted assistant turns before the model's first (a recovery probe: the
task's scripted mistake, `policies.mistake_turns`): each is tokenised, closed with the
end-of-turn token, stepped through the environment like a model turn (its errors count) and
masked 0; the model then continues from the environment's real feedback.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, Final, Sequence

from tempering.agents.config import EpisodeSettings
from tempering.agents.credit import TurnSignals, turn_signals
from tempering.agents.env import Environment, EpisodeStats, make_environment
from tempering.agents.render import AgentRenderer
from tempering.agents.tasks import AgentTask
from tempering.agents.tools import EnvFailure
from tempering.config import SamplingSettings
from tempering.rollout.engine import Engine
from tempering.types import Reward, Trajectory, TrajectoryStatus

ENV_ERROR: Final = "env_error"


@dataclass
class Turn:
    """One model turn as sampled: where it starts in the episode's ids, and what the engine gave."""

    start: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    signals: TurnSignals = field(default_factory=TurnSignals)
    """What the turn did in the environment (valid and invalid calls, errors, a test run's failures)."""


@dataclass
class AgentEpisode:
    task: AgentTask
    sample: int
    trajectory: Trajectory
    stats: EpisodeStats
    turns: list[Turn]


@dataclass
class AgentBatch:
    groups: list[list[AgentEpisode]]
    times: dict[str, float] = field(default_factory=dict)
    """Seconds: `generation`, `environment` (tool and goal calls, sandbox included), `rendering`."""
    steps: int = 0
    """Model turns taken, all episodes together."""


@dataclass
class _Live:
    task: AgentTask
    sample: int
    env: Environment
    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_length: int = 0
    rewards: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    """The last step's observation, rendered to ids on the main thread."""
    finish: str = ""
    status: TrajectoryStatus = "scored"
    error: str = ""

    @property
    def done(self) -> bool:
        return bool(self.finish)

    def add(self, ids: Sequence[int], trainable: bool, logprobs: Sequence[float] | None = None) -> None:
        self.ids += ids
        self.mask += [int(trainable)] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


def agent_rollout(
    tasks: Sequence[AgentTask],
    engine: Engine,
    renderer: AgentRenderer,
    sandbox: Any,
    sampling: SamplingSettings,
    settings: EpisodeSettings | None = None,
    *,
    n: int = 1,
    seed: int | None = None,
    opening_turns: Callable[[AgentTask], list[str]] | None = None,
) -> AgentBatch:
    """Run `n` episodes of each task with the engine as the policy; groups in task order
    (after the scripted `opening_turns` of each task, when given)."""
    settings = settings or EpisodeSettings()
    times = {"generation": 0.0, "environment": 0.0, "rendering": 0.0}
    live = [
        _Live(t, j, make_environment(settings.environment, sandbox, settings.options)) for t in tasks for j in range(n)
    ]
    steps, round_ = 0, 0
    try:  # whatever stops the loop (the engine, an interrupt), no episode's session outlives it
        for e in live:
            _start(e, renderer, times)
            for text in opening_turns(e.task) if opening_turns else []:
                if not e.done:
                    _play(e, text, renderer, settings, times)
        with ThreadPoolExecutor(max_workers=settings.env_workers) as pool:
            while True:
                for e in live:
                    if not e.done:
                        _room(e, settings)  # ends an episode with no room left for a turn
                active = [e for e in live if not e.done]
                if not active:
                    break
                steps += len(active)
                t0 = perf_counter()
                _generate(active, engine, renderer, sampling, settings, seed, round_)
                times["generation"] += perf_counter() - t0
                t0 = perf_counter()
                list(pool.map(lambda e: _step(e, settings), [e for e in active if not e.done]))
                times["environment"] += perf_counter() - t0
                t0 = perf_counter()
                for e in active:
                    if not e.done:
                        _observe(e, renderer, settings)
                times["rendering"] += perf_counter() - t0
                round_ += 1
    finally:
        for e in live:
            e.env.close()
    episodes = [_finish(e) for e in live]
    return AgentBatch([episodes[i * n : (i + 1) * n] for i in range(len(tasks))], times, steps)


def _start(e: _Live, renderer: AgentRenderer, times: dict[str, float]) -> None:
    """Open the episode's environment and render its opening prompt (a failed open: `env_error`)."""
    task = e.task
    t0 = perf_counter()
    try:
        opening = e.env.reset(task)
    except EnvFailure as exc:
        e.finish, e.status, e.error = "env_error", ENV_ERROR, str(exc)
        opening = [{"role": "user", "content": task.prompt}]
    times["environment"] += perf_counter() - t0
    t0 = perf_counter()
    e.messages = renderer.opening(opening, task.tools)
    e.add(renderer.prompt_ids(opening, task.tools), trainable=False)
    e.prompt_length = len(e.ids)
    times["rendering"] += perf_counter() - t0


def _play(e: _Live, text: str, renderer: AgentRenderer, settings: EpisodeSettings, times: dict[str, float]) -> None:
    """A scripted assistant turn: its ids (closed with end-of-turn) masked 0, stepped and observed."""
    ids = renderer.turn_ids(text)
    e.turns.append(Turn(len(e.ids), ids, [0.0] * len(ids), "scripted"))
    e.add(ids, trainable=False)
    e.messages.append({"role": "assistant", "content": text})
    t0 = perf_counter()
    _step(e, settings)
    times["environment"] += perf_counter() - t0
    if not e.done:
        _observe(e, renderer, settings)


def _room(e: _Live, settings: EpisodeSettings) -> int | None:
    """Tokens the next turn may use; None (and the episode ends) when under `min_turn_tokens`."""
    room = settings.max_context_tokens - len(e.ids)
    if room < settings.min_turn_tokens:
        _end(e, "context")
        return None
    return room


def _generate(
    active: list[_Live],
    engine: Engine,
    renderer: AgentRenderer,
    sampling: SamplingSettings,
    settings: EpisodeSettings,
    seed: int | None,
    round_: int,
) -> None:
    by_budget: dict[int, list[_Live]] = {}
    for e in active:
        by_budget.setdefault(min(sampling.max_new_tokens, _room(e, settings) or 0), []).append(e)
    for budget, episodes in sorted(by_budget.items()):
        params = sampling.params(n=1, seed=None if seed is None else seed * 100_003 + round_ * 1009 + budget)
        params = params.model_copy(
            update={"max_new_tokens": budget, "stop_token_ids": tuple({*params.stop_token_ids, renderer.eot_id})}
        )
        for e, group in zip(episodes, engine.generate([e.ids for e in episodes], params)):
            c = group[0]
            e.turns.append(Turn(len(e.ids), list(c.token_ids), list(c.logprobs), c.finish_reason))
            e.add(c.token_ids, trainable=True, logprobs=c.logprobs)
            e.messages.append({"role": "assistant", "content": c.text})
            if c.finish_reason == "length":
                _truncated(e, settings)


def _truncated(e: _Live, settings: EpisodeSettings) -> None:
    turn = e.turns[-1]
    if settings.truncated_turns == "mask":
        end = turn.start + len(turn.token_ids)
        e.mask[turn.start : end] = [0] * len(turn.token_ids)
        e.logprobs[turn.start : end] = [0.0] * len(turn.token_ids)
        e.rewards.append(0.0)
    else:
        e.rewards.append(-settings.truncation_penalty)
    _end(e, "length")


_COUNTERS = ("tool_calls", "invalid_calls", "tool_errors", "wrong_answers")


def _step(e: _Live, settings: EpisodeSettings) -> None:
    before = {k: getattr(e.env.stats, k) for k in _COUNTERS}
    observation, reward, done, info = e.env.step(e.messages[-1]["content"])
    e.turns[-1].signals = turn_signals(before, {k: getattr(e.env.stats, k) for k in _COUNTERS}, observation)
    e.rewards.append(reward)
    e.messages.extend(observation)
    e.pending = observation
    if done:
        if info.get("status") == ENV_ERROR:
            e.status, e.error = ENV_ERROR, info.get("error", "")
        e.finish = "stop"


def _observe(e: _Live, renderer: AgentRenderer, settings: EpisodeSettings) -> None:
    closed = bool(e.turns[-1].token_ids) and e.turns[-1].token_ids[-1] == renderer.eot_id
    ids = renderer.observation_ids(e.pending, closed=closed)
    if len(e.ids) + len(ids) + settings.min_turn_tokens > settings.max_context_tokens:
        _end(e, "context")
        return
    e.add(ids, trainable=False)


def _end(e: _Live, reason: str) -> None:
    """End an episode the environment did not end (its session closes; unsolved)."""
    if not e.finish:
        e.finish = reason
        e.env.close()


def _finish(e: _Live) -> AgentEpisode:
    stats = e.env.stats
    if e.status == ENV_ERROR:
        stats.status, stats.error = ENV_ERROR, stats.error or e.error
    success = stats.success and e.finish == "stop"
    rewards = [Reward(value=r) for r in (e.rewards or [0.0])]
    last = rewards[-1]
    rewards[-1] = Reward(
        value=last.value,
        components={"correct": float(success)},
        flags=[ENV_ERROR] if e.status == ENV_ERROR else list(stats.flags),
        detail=e.error or None,
    )
    trajectory = Trajectory(
        task_id=e.task.id,
        sample=e.sample,
        messages=e.messages,
        token_ids=e.ids,
        loss_mask=e.mask,
        logprobs=e.logprobs,
        prompt_length=e.prompt_length,
        rewards=rewards,
        finish_reason=e.finish,
        status=e.status,
    )
    return AgentEpisode(e.task, e.sample, trajectory, stats, e.turns)
