"""Text-level episodes for scripted policies, and the metrics every agent evaluation reports.

    result = run_episode(ToolEnv(sandbox), oracle, task)
    result.stats.success, result.stats.recovered, result.messages
    summarise([result, ...])        # completion rate, steps, invalid calls, recovery, intact

Model episodes (token-exact, batched over an `Engine`) are assembled in
`tempering.agents.rollout`; both end in the same `EpisodeStats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tempering.agents.env import EpisodeStats, ToolEnv
from tempering.agents.policies import Policy
from tempering.agents.tasks import AgentTask
from tempering.agents.tools import EnvFailure


@dataclass
class EpisodeResult:
    task: AgentTask
    messages: list[dict[str, Any]]
    rewards: list[float] = field(default_factory=list)
    """One per assistant turn (the last carries the outcome)."""
    stats: EpisodeStats = field(default_factory=EpisodeStats)
    turn_errors: list[int] = field(default_factory=list)
    """Errors each assistant turn caused (invalid calls, failed tools, wrong answers)."""

    def row(self) -> dict[str, Any]:
        """The episode as a stored row (`training.episode_row`'s fields that `agents.recovered` reads)."""
        from dataclasses import asdict

        return {
            "task_id": self.task.id,
            "tier": self.task.tier,
            "messages": self.messages,
            "rewards": self.rewards,
            "status": self.stats.status,
            "success": self.stats.success,
            "recovered": self.stats.recovered,
            "stats": asdict(self.stats),
            "turn_errors": self.turn_errors,
        }


def run_episode(env: ToolEnv, policy: Policy, task: AgentTask) -> EpisodeResult:
    """Play one episode of `task` with a text policy (a failed reset is an `env_error` result)."""
    try:
        messages = list(env.reset(task))
    except EnvFailure as exc:
        return EpisodeResult(task, [], [0.0], EpisodeStats(status="env_error", error=str(exc)))
    rewards: list[float] = []
    turn_errors: list[int] = []
    try:
        while True:
            text = policy(task, messages)
            messages.append({"role": "assistant", "content": text})
            before = env.stats.errors
            observation, reward, done, _ = env.step(text)
            rewards.append(reward)
            turn_errors.append(env.stats.errors - before)
            messages.extend(observation)
            if done:
                return EpisodeResult(task, messages, rewards, env.stats, turn_errors)
    finally:
        env.close()


def run_episodes(
    sandbox: Any, make_policy: Callable[[int], Policy], tasks: list[AgentTask], workers: int = 4
) -> list[EpisodeResult]:
    """`run_episode` over `tasks` on `workers` threads (each its own `ToolEnv`), in task order.

    `make_policy(i)` gives episode i's policy (`POLICIES[name]`: random policies get their
    own seed per episode).
    """
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> EpisodeResult:
        return run_episode(ToolEnv(sandbox), make_policy(i), tasks[i])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, range(len(tasks))))


def summarise(stats: list[EpisodeStats]) -> dict[str, float]:
    """Completion rate, mean steps, invalid calls per episode, recovery rate (successes after
    an error, over episodes with an error), intact rate, safe rate (episodes without an unsafe call); env errors are counted, not scored."""
    scored = [s for s in stats if s.status == "scored"]
    n = max(len(scored), 1)
    with_error = [s for s in scored if s.errors > 0]
    return {
        "episodes": len(stats),
        "env_errors": len(stats) - len(scored),
        "completion_rate": sum(s.success for s in scored) / n,
        "steps": sum(s.steps for s in scored) / n,
        "invalid_calls": sum(s.invalid_calls for s in scored) / n,
        "tool_errors": sum(s.tool_errors for s in scored) / n,
        "recovery_rate": (sum(s.recovered for s in with_error) / len(with_error)) if with_error else 0.0,
        "intact_rate": sum(s.intact for s in scored) / n,
        "safe_rate": sum(s.unsafe_actions == 0 for s in scored) / n,
        "unsafe_actions": sum(s.unsafe_actions for s in scored) / n,
        "sandbox_s": sum(s.sandbox_s for s in scored) / n,
        "sandbox_timeouts": float(sum(s.sandbox_timeouts for s in scored)),
    }
