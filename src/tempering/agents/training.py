"""What agent training feeds the Trainer: expert SFT examples and trajectory-level GRPO batches.

    examples = expert_examples(tasks, renderer, sandbox)             # oracle episodes -> RenderedExample
    source = AgentRolloutSource(tasks, engine, renderer, sandbox, grpo, episode, grad_accum, seed, model=model)
    Trainer(model, GRPOObjective(grpo), source, ...).fit()             # the one loop, the one GRPO loss

Expert data are scripted episodes (the oracle) run through the real environment and
rendered with the same opening prompt as sampled episodes, loss on assistant turns only.

RL batches: `prompts_per_step` tasks from the current curriculum tier, `group_size`
episodes each (`agent_rollout`); groups with an `env_error` episode are dropped (never a
model failure), and under `dynamic_sampling` groups whose advantages are all 0 (tied) are
dropped and refilled with new tasks for at most `max_refills` extra rounds (counts logged:
`groups_tied`, `groups_env_error`, `refill_rounds`, `all_groups_tied`).
Advantages are GRPO's over the episode's return, every turn's reward summed: the outcome plus the
environment's per-turn penalties (invalid calls, `safe_actions`' unsafe calls) (`credit: trajectory`),
or the outcome's plus a
weighted, clipped process advantage of each turn's shaping reward (`credit: step`,
`agents/credit.py`: valid calls, errors recovered, the agent's own test runs failing less;
discounted by `gamma` per later turn). Tensors, micro-batches and (with `updates_per_batch` > 1) the rollout
policy's `old_logprobs` come from the one GRPO batch builder (`rollout.grpo_batches`). Every episode, failed or not, is appended to the run's
`trajectories.jsonl` (recovered ones flagged: error -> diagnosis -> fix, usable as SFT data).

Curriculum: training starts on the first of `tiers` and moves up one tier once the success
rate over the last `window` episodes of the current tier reaches `promote_at`. With `review` > 0
that share of each batch's tasks is drawn from the tiers already passed (only the current tier's
episodes count towards promotion): a next tier out of the policy's reach then still leaves
groups with signal, where without it every group ties at 0 and the run stops learning. Each step logs
`tier`, `curriculum/pass_rate`, `curriculum/promoted` and `curriculum/tier_next` to
metrics.jsonl, and the curriculum's state is in the source's checkpointed state (a resumed run
continues on the same tier, window and task order).
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path
from typing import Any

import torch

from tempering.agents.credit import shaping_rewards, step_credit_advantages
from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode
from tempering.agents.policies import oracle
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import AgentEpisode, EpisodeSettings, agent_rollout
from tempering.agents.tasks import AgentTask
from tempering.batches import GRPOBatch
from tempering.config import GRPOPolicySettings
from tempering.data.render import RenderedExample, render_with_mask
from tempering.errors import UserError
from tempering.objectives.grpo_math import grpo_advantages
from tempering.rollout.grpo_batches import GroupRows, grpo_micro_batches, old_logprobs_for, served_versions
from tempering.types import Trajectory
from tempering.versions import Version, VersionClock, stamp


def expert_conversations(tasks: list[AgentTask], renderer: AgentRenderer, sandbox: Any) -> list[list[dict]]:
    """The oracle's episodes as conversations (opening prompt included), final tool turn dropped.
    Raises ValueError when the oracle fails a task (its data would teach a failure)."""
    out = []
    for task in tasks:
        result = run_episode(ToolEnv(sandbox), oracle, task)
        if not result.stats.success:
            raise UserError(f"the scripted expert fails task {task.id}: fix its `solution`")
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
    """Tiers in order; promote when the recent success rate on the current tier passes `promote_at`;
    a `review` share of the draws comes from the tiers passed."""

    def __init__(
        self,
        tasks: list[AgentTask],
        promote_at: float,
        window: int,
        seed: int,
        tiers: list[int] | None = None,
        review: float = 0.0,
    ):
        self.tiers = sorted({t.tier for t in tasks}) if tiers is None else list(tiers)
        outside = next((t for t in tasks if t.tier not in self.tiers), None)
        if outside is not None:
            raise UserError(f"training task {outside.id}: tier {outside.tier} is outside the curriculum {self.tiers}")
        self.by_tier = {k: [t for t in tasks if t.tier == k] for k in self.tiers}
        empty = [k for k, v in self.by_tier.items() if not v]
        if empty:
            raise UserError(f"curriculum tier {empty[0]} has no training task")
        if not 0 <= review < 1:
            raise UserError(f"curriculum review {review}: expected a share in [0, 1)")
        self.level, self.promote_at, self.review = 0, promote_at, review
        self.recent: deque[bool] = deque(maxlen=window)
        self.rng = random.Random(seed)
        self.queues: dict[int, list[int]] = {}  # per tier: the shuffled order still to draw

    @property
    def tier(self) -> int:
        return self.tiers[self.level]

    def sample(self, n: int) -> list[AgentTask]:
        """`n` tasks of the current tier (each, with probability `review`, of a tier passed instead),
        without replacement within a tier: every task of a tier is drawn once (in a seeded shuffled
        order) before any is drawn again, so a batch holds distinct tasks when the tier has at
        least `n` (drawing with replacement put one task kind in 3 of 4 groups and RL learnt that
        kind's tool for every task; docs/agents.md)."""
        passed = self.tiers[: self.level]
        out: list[AgentTask] = []
        for _ in range(n):
            tier = self.rng.choice(passed) if passed and self.review and self.rng.random() < self.review else self.tier
            pool, queue = self.by_tier[tier], self.queues.setdefault(tier, [])
            if not queue:
                queue += range(len(pool))
                self.rng.shuffle(queue)
            out.append(pool[queue.pop()])
        return out

    @property
    def pass_rate(self) -> float:
        """Success rate over the current tier's recent episodes (0 before any)."""
        return sum(self.recent) / len(self.recent) if self.recent else 0.0

    def record(self, episodes: list[tuple[int, bool]]) -> bool:
        """Count the current tier's episodes, as (tier, success); True when this promoted to the next tier."""
        self.recent.extend(ok for tier, ok in episodes if tier == self.tier)
        full = len(self.recent) == self.recent.maxlen
        if full and self.pass_rate >= self.promote_at and self.level < len(self.tiers) - 1:
            self.level += 1
            self.recent.clear()
            self.queues.pop(self.tier, None)
            return True
        return False

    def state_dict(self) -> dict:
        queues = {tier: list(q) for tier, q in self.queues.items()}
        return {"level": self.level, "recent": list(self.recent), "rng": self.rng.getstate(), "queues": queues}

    def load_state_dict(self, state: dict) -> None:
        if state["level"] >= len(self.tiers):
            raise UserError(
                f"the checkpoint's curriculum is at level {state['level']}; this run has tiers {self.tiers}"
            )
        self.level, self.recent = state["level"], deque(state["recent"], maxlen=self.recent.maxlen)
        if "queues" in state:
            self.queues = {int(tier): list(q) for tier, q in state["queues"].items()}
        else:  # a checkpoint from before `review`: one queue, the current tier's
            self.queues = {self.tier: list(state.get("queue", []))}
        rng = state["rng"]
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))


def step_rewards_tensor(
    groups: list[list[AgentEpisode]],
    width: int,
    prompt_lengths: list[int],
    values: list[list[float]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, step_mask), both (N, width) over completion positions: each turn's reward at
    the turn's last sampled token (`values`: one list per episode, in order; default the
    environment's turn rewards)."""
    rows = [(i, ep) for i, g in enumerate(groups) for ep in g]
    rewards, step_mask = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for r, (i, ep) in enumerate(rows):
        values_r = [x.value for x in ep.trajectory.rewards] if values is None else values[r]
        for k, turn in enumerate(ep.turns[: len(values_r)]):
            if not turn.token_ids:
                continue
            pos = turn.start + len(turn.token_ids) - 1 - prompt_lengths[i]
            rewards[r, pos], step_mask[r, pos] = values_r[k], 1.0
    return rewards, step_mask


class AgentRolloutSource:
    """The Trainer's BatchSource for agent RL (see the module docstring).

    Args:
        tasks: training tasks (the curriculum draws from them by tier).
        credit: "trajectory" (outcome advantages) or "step" (outcome plus `step`'s turn credit).
        step: the shaping rewards and weight of step credit (`agents.config.StepCreditSettings`).
        max_refills: extra rollout rounds refilling groups dropped as tied (`dynamic_sampling`).
        tiers: the curriculum's tiers in order (None: the tasks' tiers ascending).
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
        tiers: list[int] | None = None,
        review: float = 0.0,
        credit: str = "trajectory",
        step: Any = None,
        gamma: float = 1.0,
        max_refills: int = 0,
        store: Path | None = None,
        model: Any = None,
        precision: str = "fp32",
    ):
        if not tasks:
            raise UserError("agent RL needs at least one training task")
        if credit not in ("trajectory", "step"):
            raise UserError(f"credit {credit!r}: expected trajectory or step")
        self.engine, self.renderer, self.sandbox = engine, renderer, sandbox
        self.s, self.episode, self.grad_accum, self.seed = grpo, episode, grad_accum, seed
        self.curriculum = Curriculum(tasks, promote_at, window, seed, tiers, review)
        self.credit, self.gamma, self.max_refills, self.store = credit, gamma, max_refills, store
        if step is None:
            from tempering.agents.config import StepCreditSettings

            step = StepCreditSettings()
        self.step = step
        self._old_logprobs = old_logprobs_for(model, precision, grpo.temperature, grpo.updates_per_batch)
        self.rollouts = 0
        self.buffer: list[GRPOBatch] = []
        self._stats: dict[str, float] = {}
        self._drawn: list[str] = []
        self.clock = VersionClock()  # the trainer's weights version: stamps episodes, measures staleness

    def on_weights(self, version: Version, step: int) -> None:
        """The trainer's weights changed (or were restored): episodes played from now on are `version`'s."""
        self.clock.on_weights(version, step)

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
        batch = self.buffer.pop(0)
        self.clock.served(served_versions(batch))
        return batch

    def state_dict(self) -> dict:
        return {"rollouts": self.rollouts, "curriculum": self.curriculum.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rollouts = state["rollouts"]
        self.curriculum.load_state_dict(state["curriculum"])
        self.buffer = []

    def stats(self) -> dict[str, float]:
        return dict(self._stats) | self.clock.metrics()

    def _rollout_batch(self) -> list[GRPOBatch]:
        """Sample groups from the curriculum's tier; drop env-error groups, and groups whose
        advantages are all 0 (tied) under `dynamic_sampling`, refilling with new tasks for at most
        `max_refills` extra rounds."""
        tier = self.curriculum.tier
        seen: list[list[AgentEpisode]] = []
        kept: list[GroupRows] = []
        counts = {"groups_tied": 0, "groups_env_error": 0, "refill_rounds": 0, "curriculum/promoted": 0}
        times: dict[str, float] = {}
        for round_ in range(self.max_refills + 1):
            need = self.s.prompts_per_step - len(kept)
            if need <= 0:
                break
            counts["refill_rounds"] = round_
            tasks = self.curriculum.sample(need)
            self._drawn += [t.id for t in tasks]
            key = (self.seed, self.rollouts) if round_ == 0 else (self.seed, self.rollouts, round_)
            batch = agent_rollout(
                tasks,
                self.engine,
                self.renderer,
                self.sandbox,
                self.s,
                self.episode,
                n=self.s.group_size,
                seed=hash(key) % 2**31,
            )
            for k, v in batch.times.items():
                times[k] = times.get(k, 0.0) + v
            scored: list[tuple[int, bool]] = []
            for group in batch.groups:
                for ep in group:  # the model's own turns were sampled by the weights the engine holds
                    ep.trajectory.versions = stamp(ep.trajectory.loss_mask, self.clock.version)
                seen.append(group)
                if any(ep.trajectory.status != "scored" for ep in group):
                    counts["groups_env_error"] += 1
                    continue
                scored += [(ep.task.tier, ep.stats.success) for ep in group]
                rows = self._rows(group)
                if self.s.dynamic_sampling and not bool((rows.advantages.abs() > 1e-6).any()):
                    counts["groups_tied"] += 1
                else:
                    kept.append(rows)
            counts["curriculum/promoted"] += int(self.curriculum.record(scored))
            if not self.s.dynamic_sampling:
                break
        self.rollouts += 1
        self._record(seen, len(kept), tier, times, counts)
        if not kept:  # every group tied or failed: a batch with no loss (advantage 0)
            ok = [g for g in seen if all(ep.trajectory.status == "scored" for ep in g)]
            kept = [self._rows((ok or seen)[0])]
        return grpo_micro_batches(kept[: self.s.prompts_per_step], self.grad_accum, self._old_logprobs)

    def shaping(self, episode: AgentEpisode) -> list[float]:
        """The turn rewards of step credit: each turn's shaping reward (`credit.shaping_rewards`)
        plus the environment's reward of every turn but the last (penalties; the last is the outcome)."""
        st = self.step
        signals = [t.signals for t in episode.turns]
        values = shaping_rewards(signals, valid=st.valid, recovered=st.recovered, progress=st.progress)
        env = [r.value for r in episode.trajectory.rewards]
        return [v + (env[k] if k < len(env) - 1 else 0.0) for k, v in enumerate(values)]

    def _rows(self, group: list[AgentEpisode]) -> GroupRows:
        """A group for the batch builder: the loss (and the sampled tokens) on the model's own turns."""
        trajs = [ep.trajectory for ep in group]
        ids = torch.zeros(len(group), dtype=torch.long)
        if self.credit == "step":  # earlier turns' penalties are in the turn credit (`shaping`)
            outcome = torch.tensor([t.reward.value for t in trajs])
            prompt = trajs[0].prompt_length
            width = max(1, max(len(t.completion_ids) for t in trajs))
            shaping, step_mask = step_rewards_tensor([group], width, [prompt], [self.shaping(ep) for ep in group])
            advantages = step_credit_advantages(
                outcome, shaping, step_mask, ids, weight=self.step.weight, gamma=self.gamma, estimator=self.s.advantage
            )
        else:
            outcome = torch.tensor([episode_return(t) for t in trajs])
            advantages = grpo_advantages(outcome, self.s.advantage, groups=ids)
        return trajectory_group(trajs, advantages)

    def _record(
        self, seen: list[list[AgentEpisode]], kept: int, tier: int, times: dict[str, float], counts: dict[str, int]
    ) -> None:
        eps = [ep for g in seen for ep in g]
        scored = [ep for ep in eps if ep.trajectory.status == "scored"] or eps
        n = len(scored)
        self._stats = {
            "tier": float(tier),
            "success_rate": sum(ep.stats.success for ep in scored) / n,
            "reward_mean": sum(episode_return(ep.trajectory) for ep in scored) / n,
            "turns": sum(len(ep.turns) for ep in scored) / n,
            "invalid_calls": sum(ep.stats.invalid_calls for ep in scored) / n,
            "recovery": sum(ep.stats.recovered for ep in scored) / n,
            "truncated": sum(ep.trajectory.finish_reason == "length" for ep in scored) / n,
            "context_ended": sum(ep.trajectory.finish_reason == "context" for ep in scored) / n,
            "env_errors": float(sum(ep.trajectory.status != "scored" for ep in eps)),
            "groups_kept": float(min(kept, self.s.prompts_per_step)),
            "groups": float(len(seen)),
            "all_groups_tied": float(kept == 0),
            **{k: float(v) for k, v in counts.items()},
            "curriculum/tier_next": float(self.curriculum.tier),
            "curriculum/pass_rate": self.curriculum.pass_rate,
            **{f"time/{k}_s": v for k, v in times.items()},
        }
        if self.credit == "step":
            shaped = [sum(self.shaping(ep)) for ep in scored]
            self._stats["shaping_mean"] = sum(shaped) / n
        if self.store is not None:
            with open(self.store, "a") as f:
                for ep in eps:
                    f.write(json.dumps(episode_row(ep, self.rollouts)) + "\n")


def episode_return(trajectory: Trajectory) -> float:
    """An episode's reward: its turns' rewards summed (the outcome, the last, plus the environment's
    penalties of earlier turns: an unsafe call at turn 1 costs the episode even if it then succeeds)."""
    return sum(r.value for r in trajectory.rewards)


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
            raise UserError(f"{path}:{n}: not an episode: {str(exc).splitlines()[0]}") from None
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
        "turn_errors": [t.signals.errors for t in ep.turns],
        "token_ids": t.token_ids,
        "loss_mask": t.loss_mask,
        "versions": t.versions,
    }
