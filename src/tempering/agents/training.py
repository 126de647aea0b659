"""What agent training feeds the Trainer: expert SFT examples and trajectory-level GRPO batches.

    examples = expert_examples(tasks, renderer, sandbox)             # oracle episodes -> RenderedExample
    source = AgentRolloutSource(tasks, engine, renderer, sandbox, grpo, episode, grad_accum, seed, model=model)
    Trainer(model, GRPOObjective(grpo), source, ...).fit()             # the one loop, the one GRPO loss

Expert data are scripted episodes (the oracle) run through the real environment and
rendered with the same opening prompt as sampled episodes, loss on assistant turns only.

RL batches: `prompts_per_step` tasks from the current curriculum tier, `group_size`
episodes each (`agent_rollout`); groups with an `env_error` episode are dropped (never a
model failure), groups whose rewards all tie are dropped when `dynamic_sampling` is on.
Advantages are GRPO's over the episode outcome (`grpo_advantages`), or with
`step_rewards` over each turn's reward at the turn's last token (DeepSeekMath process
supervision; turn rewards carry invalid-call penalties and the outcome), discounted by
`gamma` per later turn. Tensors, micro-batches and (with `updates_per_batch` > 1) the rollout
policy's `old_logprobs` come from the one GRPO batch builder (`rollout.grpo_batches`). Every episode, failed or not, is appended to the run's
`trajectories.jsonl` (recovered ones flagged: error -> diagnosis -> fix, usable as SFT data).

Curriculum: training starts on the lowest tier and moves up one tier once the success
rate over the last `window` episodes of the current tier reaches `promote_at`.
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path
from typing import Any

import torch

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode
from tempering.agents.policies import oracle
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import AgentEpisode, EpisodeSettings, agent_rollout
from tempering.agents.tasks import AgentTask
from tempering.batches import GRPOBatch
from tempering.config import GRPOPolicySettings
from tempering.data.render import RenderedExample, render_with_mask
from tempering.objectives.grpo_math import grpo_advantages
from tempering.rollout.grpo_batches import GroupRows, grpo_micro_batches, old_logprobs_for
from tempering.types import Trajectory


def expert_conversations(tasks: list[AgentTask], renderer: AgentRenderer, sandbox: Any) -> list[list[dict]]:
    """The oracle's episodes as conversations (opening prompt included), final tool turn dropped.
    Raises ValueError when the oracle fails a task (its data would teach a failure)."""
    out = []
    for task in tasks:
        result = run_episode(ToolEnv(sandbox), oracle, task)
        if not result.stats.success:
            raise ValueError(f"the scripted expert fails task {task.id}: fix its `solution`")
        messages = renderer.opening(result.messages[:1], task.tools) + result.messages[1:]
        while messages[-1]["role"] != "assistant":
            messages.pop()
        out.append([{k: v for k, v in m.items() if k in ("role", "content")} for m in messages])
    return out


def expert_examples(tasks: list[AgentTask], renderer: AgentRenderer, sandbox: Any) -> list[RenderedExample]:
    """Expert conversations rendered for SFT (assistant tokens only, token-exact prefixes)."""
    tok = renderer.tokenizer
    return [
        render_with_mask(tok, c, renderer.style, renderer.eot_id)
        for c in expert_conversations(tasks, renderer, sandbox)
    ]


class Curriculum:
    """Tiers in order; promote when the recent success rate on the current tier passes `promote_at`."""

    def __init__(self, tasks: list[AgentTask], promote_at: float, window: int, seed: int):
        self.tiers = sorted({t.tier for t in tasks})
        self.by_tier = {k: [t for t in tasks if t.tier == k] for k in self.tiers}
        self.level, self.promote_at = 0, promote_at
        self.recent: deque[bool] = deque(maxlen=window)
        self.rng = random.Random(seed)
        self.queue: list[int] = []

    @property
    def tier(self) -> int:
        return self.tiers[self.level]

    def sample(self, n: int) -> list[AgentTask]:
        """`n` tasks of the current tier, without replacement: every task of the tier is drawn once
        (in a seeded shuffled order) before any is drawn again, so a batch holds distinct tasks
        when the tier has at least `n` (drawing with replacement put one task kind in 3 of 4 groups
        and RL learnt that kind's tool for every task; docs/agents.md)."""
        pool = self.by_tier[self.tier]
        out: list[AgentTask] = []
        while len(out) < n:
            if not self.queue:
                self.queue = list(range(len(pool)))
                self.rng.shuffle(self.queue)
            out.append(pool[self.queue.pop()])
        return out

    def record(self, successes: list[bool]) -> None:
        self.recent.extend(successes)
        full = len(self.recent) == self.recent.maxlen
        if full and sum(self.recent) / len(self.recent) >= self.promote_at and self.level < len(self.tiers) - 1:
            self.level += 1
            self.recent.clear()
            self.queue = []

    def state_dict(self) -> dict:
        return {"level": self.level, "recent": list(self.recent), "rng": self.rng.getstate(), "queue": list(self.queue)}

    def load_state_dict(self, state: dict) -> None:
        self.level, self.recent = state["level"], deque(state["recent"], maxlen=self.recent.maxlen)
        self.queue = list(state.get("queue", []))
        rng = state["rng"]
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))


def step_rewards_tensor(
    groups: list[list[AgentEpisode]], width: int, prompt_lengths: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, step_mask), both (N, width) over completion positions: each turn's reward at
    the turn's last sampled token."""
    rows = [(i, ep) for i, g in enumerate(groups) for ep in g]
    rewards, step_mask = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for r, (i, ep) in enumerate(rows):
        values = [x.value for x in ep.trajectory.rewards]
        for k, turn in enumerate(ep.turns[: len(values)]):
            pos = turn.start + len(turn.token_ids) - 1 - prompt_lengths[i]
            rewards[r, pos], step_mask[r, pos] = values[k], 1.0
    return rewards, step_mask


def discounted_step_advantages(
    rewards: torch.Tensor, step_mask: torch.Tensor, groups: torch.Tensor, gamma: float, estimator: str = "grpo"
) -> torch.Tensor:
    """Process-supervision advantages with a discount: (N, T) -> (N, T).

    Step rewards go through the advantage estimator as in `grpo_advantages`; a token's
    advantage is sum_k gamma^k * (normalised reward of the k-th step at or after it), so
    gamma = 1 is exactly `grpo_advantages(rewards, groups=..., step_mask=...)`.
    """
    undiscounted = grpo_advantages(rewards, estimator, groups=groups, step_mask=step_mask)
    if gamma == 1.0:
        return undiscounted
    # the reverse cumsum's differences are the normalised step rewards, at the step tokens
    shifted = torch.cat([undiscounted[:, 1:], torch.zeros_like(undiscounted[:, :1])], dim=1)
    normalised = (undiscounted - shifted) * step_mask
    out = torch.zeros_like(normalised)
    running = torch.zeros(normalised.shape[0], dtype=normalised.dtype)
    for t in range(normalised.shape[1] - 1, -1, -1):
        running = torch.where(step_mask[:, t] > 0, normalised[:, t] + gamma * running, running)
        out[:, t] = running
    return out


class AgentRolloutSource:
    """The Trainer's BatchSource for agent RL (see the module docstring).

    Args:
        tasks: training tasks (the curriculum draws from them by tier).
        store: a JSONL path every episode is appended to (None: not kept).
        model, precision: the trainer's model and precision, which recompute the rollout policy's
            log-probs when `updates_per_batch` > 1 (needed then, unused otherwise).
    """

    def __init__(
        self,
        tasks: list[AgentTask],
        engine: Any,
        renderer: AgentRenderer,
        sandbox: Any,
        grpo: GRPOPolicySettings,
        episode: EpisodeSettings,
        grad_accum: int,
        seed: int,
        *,
        promote_at: float = 0.8,
        window: int = 32,
        step_rewards: bool = False,
        gamma: float = 1.0,
        store: Path | None = None,
        model: Any = None,
        precision: str = "fp32",
    ):
        if not tasks:
            raise ValueError("agent RL needs at least one training task")
        self.engine, self.renderer, self.sandbox = engine, renderer, sandbox
        self.s, self.episode, self.grad_accum, self.seed = grpo, episode, grad_accum, seed
        self.curriculum = Curriculum(tasks, promote_at, window, seed)
        self.step_rewards, self.gamma, self.store = step_rewards, gamma, store
        self._old_logprobs = old_logprobs_for(model, precision, grpo.temperature, grpo.updates_per_batch)
        self.rollouts = 0
        self.buffer: list[GRPOBatch] = []
        self._stats: dict[str, float] = {}
        self._drawn: list[str] = []

    @property
    def at_boundary(self) -> bool:
        """Whether a checkpoint taken now resumes exactly (no update of the current batch left:
        its episodes and old log-probs could not be drawn again from the updated weights)."""
        return not self.buffer

    def consumed(self) -> list[str]:
        """Task ids of the rollout batches drawn since the last call, in order (the run's consumed.jsonl)."""
        out, self._drawn = self._drawn, []
        return out

    def next_batch(self) -> GRPOBatch:
        if not self.buffer:
            micro = self._rollout_batch()
            self.buffer = [b for _ in range(self.s.updates_per_batch) for b in micro]
        return self.buffer.pop(0)

    def state_dict(self) -> dict:
        return {"rollouts": self.rollouts, "curriculum": self.curriculum.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rollouts = state["rollouts"]
        self.curriculum.load_state_dict(state["curriculum"])
        self.buffer = []

    def stats(self) -> dict[str, float]:
        return dict(self._stats)

    def _rollout_batch(self) -> list[GRPOBatch]:
        tier = self.curriculum.tier
        tasks = self.curriculum.sample(self.s.prompts_per_step)
        self._drawn += [t.id for t in tasks]
        batch = agent_rollout(
            tasks,
            self.engine,
            self.renderer,
            self.sandbox,
            self.s,
            self.episode,
            n=self.s.group_size,
            seed=hash((self.seed, self.rollouts)) % 2**31,
        )
        self.rollouts += 1
        seen = batch.groups
        ok = [g for g in seen if all(ep.trajectory.status == "scored" for ep in g)]
        kept = [g for g in ok if not self.s.dynamic_sampling or len({ep.trajectory.reward.value for ep in g}) > 1]
        scored = [ep for g in ok for ep in g]
        self.curriculum.record([ep.stats.success for ep in scored])
        self._record(seen, kept, tier, batch)
        if not kept:  # every group tied or failed: a batch with no loss (advantage 0)
            kept = ok[:1] or seen[:1]
        return grpo_micro_batches([self._rows(g) for g in kept], self.grad_accum, self._old_logprobs)

    def _rows(self, group: list[AgentEpisode]) -> GroupRows:
        """A group for the batch builder: the loss (and the sampled tokens) on the model's own turns."""
        trajs = [ep.trajectory for ep in group]
        prompt = trajs[0].token_ids[: trajs[0].prompt_length]
        if self.step_rewards:
            width = max(1, max(len(t.completion_ids) for t in trajs))
            rewards, step_mask = step_rewards_tensor([group], width, [len(prompt)])
            ids = torch.zeros(len(group), dtype=torch.long)
            advantages = discounted_step_advantages(rewards, step_mask, ids, self.gamma, self.s.advantage)
        else:
            rewards = torch.tensor([[t.reward.value for t in trajs]])
            advantages = grpo_advantages(rewards, self.s.advantage).reshape(-1)
        return trajectory_group(trajs, advantages)

    def _record(self, seen: list[list[AgentEpisode]], kept: list, tier: int, batch: Any) -> None:
        eps = [ep for g in seen for ep in g]
        scored = [ep for ep in eps if ep.trajectory.status == "scored"] or eps
        n = len(scored)
        self._stats = {
            "tier": float(tier),
            "success_rate": sum(ep.stats.success for ep in scored) / n,
            "reward_mean": sum(ep.trajectory.reward.value for ep in scored) / n,
            "turns": sum(len(ep.turns) for ep in scored) / n,
            "invalid_calls": sum(ep.stats.invalid_calls for ep in scored) / n,
            "recovery": sum(ep.stats.recovered for ep in scored) / n,
            "truncated": sum(ep.trajectory.finish_reason == "length" for ep in scored) / n,
            "context_ended": sum(ep.trajectory.finish_reason == "context" for ep in scored) / n,
            "env_errors": float(sum(ep.trajectory.status != "scored" for ep in eps)),
            "groups_kept": float(len(kept)),
            "groups": float(len(seen)),
            **{f"time/{k}_s": v for k, v in batch.times.items()},
        }
        if self.store is not None:
            with open(self.store, "a") as f:
                for ep in eps:
                    f.write(json.dumps(episode_row(ep, self.rollouts)) + "\n")


def trajectory_group(trajs: list[Trajectory], advantages: torch.Tensor) -> GroupRows:
    """A group of multi-turn episodes for the batch builder: the loss, and the sampled tokens,
    on the model's own turns (`loss_mask`); they share the first one's prompt."""
    prompt = trajs[0].token_ids[: trajs[0].prompt_length]
    if any(t.token_ids[: t.prompt_length] != prompt for t in trajs):
        raise ValueError("the episodes of a group must share their prompt")
    masks = [t.loss_mask[t.prompt_length :] for t in trajs]
    return GroupRows(prompt, trajs, masks, masks, advantages)


def read_episodes(path: str | Path) -> list[Trajectory]:
    """Token-exact episodes from a JSONL file of `Trajectory` rows with extra keys (the served
    episodes of `temper feedback export --trajectories`); a bad row is a one-line error."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(Trajectory.model_validate({k: v for k, v in row.items() if k in Trajectory.model_fields}))
        except (json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not an episode: {str(exc).splitlines()[0]}") from None
    return out


def episode_row(ep: AgentEpisode, rollout: int) -> dict[str, Any]:
    """One stored episode: kept whether it failed or not; `recovered` marks error -> fix episodes."""
    from dataclasses import asdict

    t = ep.trajectory
    return {
        "rollout": rollout,
        "task_id": ep.task.id,
        "tier": ep.task.tier,
        "sample": ep.sample,
        "messages": t.messages,
        "rewards": [r.value for r in t.rewards],
        "status": t.status,
        "finish_reason": t.finish_reason,
        "success": ep.stats.success,
        "recovered": ep.stats.recovered,
        "stats": asdict(ep.stats),
        "token_ids": t.token_ids,
        "loss_mask": t.loss_mask,
    }
