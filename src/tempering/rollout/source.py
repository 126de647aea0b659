"""Rollout batches for GRPO: sample -> verify (in a worker pool) -> filter -> advantages.

`RolloutSource` is the Trainer's BatchSource for RL. Each rollout batch:
  1. takes the next `prompts_per_step` tasks (a seeded permutation, cycled);
  2. samples and scores G trajectories per prompt through the one rollout path
     (`rollout.rollout.start_rollout`), in `generation_chunks` chunks, each finished chunk
     going to the reward workers so verification (sandbox calls included) overlaps generation;
  3. applies the truncation policy; drops groups with a sample the verifier could not judge
     (status `verifier_error` / `timeout`: never a model failure, so never a negative
     advantage) and, with dynamic sampling, groups whose rewards all match, then
     refills from new prompts (at most `max_refills` extra rounds);
  4. computes group-normalised advantages, writes every sample to the trajectory store, and
     splits the groups into `grad_accum` micro-batches, served `updates_per_batch` times.

Sampling is seeded by (seed, rollout index, round), so a resumed run draws what an
uninterrupted one would have drawn from the same weights.

With `rollout_ahead` (an engine that does not share the trainer's model: scale/'s engine
replicas), steps 1-2 of the next batch run in a background thread while the trainer updates
on this one: its samples come from the weights synced before that update (staleness 1,
logged as `staleness`), and its `old_logprobs` are the engine's, so the clipped importance
ratio p_train / p_rollout corrects for the stale policy. A checkpoint taken meanwhile saves
the cursor where the prefetched batch starts: a resume samples it again, from the resumed
weights (so a resume is exact in data order, not in samples).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from tempering.config import GRPOSettings
from tempering.data.padding import PAD_ID, left_pad
from tempering.models.logprobs import grouped_logprobs
from tempering.models.precision import autocast
from tempering.objectives.grpo_math import grpo_advantages
from tempering.rollout.engine import Engine
from tempering.rollout.rollout import RewardWorkers, ThreadRewardWorkers, start_rollout
from tempering.rollout.store import TrajectoryRow, TrajectoryStore
from tempering.types import Task, Trajectory


@dataclass
class Group:
    """The samples of one prompt: its task and one trajectory per sample."""

    task: Task
    trajectories: list[Trajectory]

    @property
    def prompt_ids(self) -> list[int]:
        first = self.trajectories[0]
        return first.token_ids[: first.prompt_length]

    @property
    def values(self) -> list[float]:
        return [t.reward.value for t in self.trajectories]

    @property
    def verifier_failed(self) -> bool:
        return any(not t.scored for t in self.trajectories)


class RolloutSource:
    """The GRPO `BatchSource`. `workers`: where completions are scored (default: a thread pool
    of `settings.reward_workers`; scale/ has Ray actors). `model`: the trainer's model, synced
    into the engine before each rollout batch (a no-op for the in-process engine, which shares it)."""

    def __init__(
        self,
        tasks: list[Task],
        engine: Engine,
        settings: GRPOSettings,
        grad_accum: int,
        seed: int,
        store: TrajectoryStore | None = None,
        model: Any = None,
        precision: str = "fp32",
        workers: RewardWorkers | None = None,
    ):
        if not tasks:
            raise ValueError("GRPO needs at least one training task")
        self.tasks, self.engine, self.s = tasks, engine, settings
        self.grad_accum, self.seed, self.store = grad_accum, seed, store
        self.model, self.precision = model, precision
        self.workers = workers if workers is not None else ThreadRewardWorkers(settings.reward_workers)
        self.order = list(range(len(tasks)))
        random.Random(seed).shuffle(self.order)
        self.cursor = 0
        self.rollouts = 0
        self.buffer: list[dict[str, Any]] = []
        self._stats: dict[str, float] = {}
        self._prompt_cache: dict[str, list[int]] = {}
        self._ahead: Future | None = None  # the next batch, sampling in the background (rollout_ahead)
        self._ahead_state: dict = {}
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rollout-ahead") if settings.rollout_ahead else None

    # -- BatchSource -------------------------------------------------------------------
    def next_batch(self) -> dict[str, Any]:
        if not self.buffer:
            micro = self._rollout_batch()
            self.buffer = [b for _ in range(self.s.updates_per_batch) for b in micro]
        return self.buffer.pop(0)

    def state_dict(self) -> dict:
        if self._ahead is not None:  # where the prefetched batch starts: a resume samples it again
            return dict(self._ahead_state)
        return {"cursor": self.cursor, "rollouts": self.rollouts}

    def load_state_dict(self, state: dict) -> None:
        self.cursor, self.rollouts = state["cursor"], state["rollouts"]
        self.buffer = []  # a resume starts at the next rollout batch

    def stats(self) -> dict[str, float]:
        return dict(self._stats)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self.workers.close()

    # -- one rollout batch ---------------------------------------------------------------
    def _next_tasks(self, n: int) -> list[Task]:
        out = []
        for _ in range(n):
            out.append(self.tasks[self.order[self.cursor % len(self.order)]])
            self.cursor += 1
        return out

    def _prompt(self, task: Task) -> list[int]:
        if task.id not in self._prompt_cache:
            self._prompt_cache[task.id] = self.engine.chat_prompt(task.chat())
        return self._prompt_cache[task.id]

    def _generate_and_score(self, tasks: list[Task], index: int, round_: int) -> tuple[list[Group], float, float]:
        """One rollout round; each generation chunk is scored while the next generates."""
        s = self.s
        seed = hash((self.seed, index, round_)) % 2**31
        per = max(1, math.ceil(len(tasks) / s.generation_chunks))
        chunks = [(range(start, min(start + per, len(tasks))), seed + start) for start in range(0, len(tasks), per)]
        t0 = time.perf_counter()
        pending = start_rollout(
            tasks, self.engine, s, self.workers, n=s.group_size, prompts=[self._prompt(t) for t in tasks], chunks=chunks
        )
        groups = [Group(t, trajs) for t, trajs in zip(tasks, pending.collect(s.verifier_timeout_s))]
        return groups, pending.gen_s, time.perf_counter() - t0 - pending.gen_s

    def _apply_truncation(self, group: Group) -> None:
        if self.s.truncation != "penalty":
            return
        for t in group.trajectories:
            if t.truncated and t.scored:
                r = t.reward
                t.rewards[-1] = r.model_copy(
                    update={"value": self.s.truncation_reward, "flags": r.flags + ["truncated"]}
                )

    def _rollout_batch(self) -> list[dict[str, Any]]:
        """The next batch's micro-batches: sampled now, or taken from the background (rollout_ahead)."""
        if self._ahead is not None:
            sampled, staleness = self._ahead.result(), 1
            self._ahead = None
        else:
            self._sync()
            sampled, staleness = self._sample(), 0
        if self._executor is not None:  # sample the next batch from these weights while this one trains
            self._ahead_state = {"cursor": self.cursor, "rollouts": self.rollouts}
            self._sync()
            self._ahead = self._executor.submit(self._sample)
        return self._build(*sampled, staleness=staleness)

    def _sync(self) -> None:
        """The trainer's weights into the engine (on the trainer's thread, between updates)."""
        if self.model is not None:
            self.engine.sync_weights(self.model)

    def _sample(self) -> tuple[int, list[Group], list[Group], Counter, float, float]:
        """Steps 1-3: sample, score and filter one batch (engine and reward workers only, no model)."""
        s = self.s
        index = self.rollouts
        kept: list[Group] = []
        seen: list[Group] = []
        counts: Counter = Counter()
        gen_s = score_s = 0.0
        for round_ in range(s.max_refills + 1):
            need = s.prompts_per_step - len(kept)
            if need <= 0:
                break
            groups, g, v = self._generate_and_score(self._next_tasks(need), index, round_)
            gen_s, score_s = gen_s + g, score_s + v
            for group in groups:
                self._apply_truncation(group)
                seen.append(group)
                if group.verifier_failed:
                    counts["verifier_failed_groups"] += 1
                elif s.dynamic_sampling and len(set(group.values)) == 1:
                    counts["zero_variance_groups"] += 1
                else:
                    kept.append(group)
            if not s.dynamic_sampling:
                break
        if not kept:  # every group tied: train on them anyway (advantage 0 -> no gradient)
            kept = [g for g in seen if not g.verifier_failed] or seen[:1]
            counts["all_groups_tied"] += 1
        self.rollouts += 1
        return index, seen, kept[: s.prompts_per_step], counts, gen_s, score_s

    def _build(
        self,
        index: int,
        seen: list[Group],
        kept: list[Group],
        counts: Counter,
        gen_s: float,
        score_s: float,
        staleness: int,
    ) -> list[dict[str, Any]]:
        """Step 4: advantages, the trajectory store and the micro-batches of a sampled batch."""
        rewards = torch.tensor([g.values for g in kept], dtype=torch.float32)
        advantages = grpo_advantages(rewards, scale_std=self.s.scale_std)
        step = index * self.s.updates_per_batch + 1
        self._record(seen, kept, advantages, counts, gen_s, score_s, step)
        self._stats["staleness"] = staleness
        micro = self._micro_batches(kept, advantages)
        if staleness:  # the old policy is the one that sampled: the engine's log-probs
            for batch in micro:
                batch["old_logprobs"] = batch["engine_logprobs"].clone()
        return micro

    # -- tensors -------------------------------------------------------------------------
    def _micro_batches(self, groups: list[Group], advantages: torch.Tensor) -> list[dict[str, Any]]:
        n_micro = min(self.grad_accum, len(groups))
        per = math.ceil(len(groups) / n_micro)
        out = []
        for start in range(0, len(groups), per):
            out.append(self._tensors(groups[start : start + per], advantages[start : start + per]))
        while len(out) < self.grad_accum:  # fewer kept groups than micro-batches: empty ones (no loss)
            out.append({**out[-1], "loss_mask": torch.zeros_like(out[-1]["loss_mask"]), "n_real_tokens": 0})
        return out

    def _tensors(self, groups: list[Group], advantages: torch.Tensor) -> dict[str, Any]:
        pad = PAD_ID
        prompt_ids, prompt_mask = left_pad([g.prompt_ids for g in groups], pad)
        trajs = [t for g in groups for t in g.trajectories]
        c_width = max(len(t.completion_ids) for t in trajs)
        completion_ids = torch.full((len(trajs), c_width), pad, dtype=torch.long)
        completion_mask = torch.zeros_like(completion_ids)
        engine_logprobs = torch.zeros((len(trajs), c_width), dtype=torch.float32)
        for i, t in enumerate(trajs):
            ids = t.completion_ids
            completion_ids[i, : len(ids)] = torch.tensor(ids)
            completion_mask[i, : len(ids)] = 1
            engine_logprobs[i, : len(ids)] = torch.tensor(t.completion_logprobs)
        loss_mask = completion_mask.clone()
        if self.s.truncation == "mask":
            for i, t in enumerate(trajs):
                if t.truncated:
                    loss_mask[i] = 0
        batch = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "loss_mask": loss_mask,
            "engine_logprobs": engine_logprobs,
            "advantages": advantages.reshape(-1),
            "n_real_tokens": int(completion_mask.sum()) + int(prompt_mask.sum()),
        }
        if self.s.updates_per_batch > 1:
            batch["old_logprobs"] = self._old_logprobs(batch)
        return batch

    @torch.no_grad()
    def _old_logprobs(self, batch: dict[str, Any]) -> torch.Tensor:
        """The rollout policy's log-probs, recomputed by the trainer's own forward (mu > 1).

        The batch is built on the CPU; the forward runs where the model lives, and the
        result comes back to the CPU with the rest of the batch (the Trainer moves it all).
        """
        device = next(self.model.parameters()).device
        args = [batch[k].to(device) for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")]
        was = self.model.training
        self.model.eval()
        try:
            with autocast(self.precision, device):
                logp, _ = grouped_logprobs(self.model, *args, self.s.temperature)
        finally:
            self.model.train(was)
        return logp.float().cpu()

    # -- metrics and the trajectory store ------------------------------------------------
    def _record(
        self,
        seen: list[Group],
        kept: list[Group],
        advantages: torch.Tensor,
        counts: Counter,
        gen_s: float,
        score_s: float,
        step: int,
    ) -> None:
        samples = [(g, t, t.reward) for g in seen for t in g.trajectories]
        values = torch.tensor([r.value for _, _, r in samples])
        by_source: dict[str, list[float]] = defaultdict(list)
        flags: Counter = Counter()
        guard = []
        for g, _, r in samples:
            by_source[g.task.source or "unknown"].append(r.value)
            flags.update(r.flags)
            if "heldout_pass_fraction" in r.components:
                guard.append(r.components["heldout_pass_fraction"])
        stats: dict[str, float] = {
            "reward_mean": float(values.mean()),
            "reward_std": float(values.std(unbiased=False)),
            "accuracy": sum(r.passed for _, _, r in samples) / len(samples),
            "zero_variance_share": counts["zero_variance_groups"] / len(seen),
            "groups_generated": len(seen),
            "groups_kept": len(kept),
            "verifier_failed_groups": counts["verifier_failed_groups"],
            "response_len": sum(len(t.completion_ids) for _, t, _ in samples) / len(samples),
            "truncation_rate": sum(c.truncated for _, c, _ in samples) / len(samples),
            "completions": len(samples),
            "gen_s": gen_s,
            "score_s": score_s,
            **getattr(self.engine, "last_sync", {}),
        }
        for source, vals in by_source.items():
            t = torch.tensor(vals)
            stats[f"reward/{source}/mean"] = float(t.mean())
            stats[f"reward/{source}/std"] = float(t.std(unbiased=False))
        for name in {k for _, _, r in samples for k in r.components}:
            stats[f"component/{name}"] = sum(r.components.get(name, 0.0) for _, _, r in samples) / len(samples)
        for flag, n in flags.items():
            stats[f"flags/{flag}"] = n
        if guard:
            stats["heldout_guard_rate"] = sum(guard) / len(guard)
        self._stats = stats
        if self.store is None:
            return
        adv_of = {id(g): advantages[i].tolist() for i, g in enumerate(kept)}
        rows = []
        for gi, g in enumerate(seen):
            advs = adv_of.get(id(g), [0.0] * len(g.trajectories))
            prompt = g.task.prompt or g.task.chat()[-1].get("content") or ""
            for j, t in enumerate(g.trajectories):
                r = t.reward
                rows.append(
                    TrajectoryRow(
                        self.store.run,
                        step,
                        g.task.id,
                        g.task.source or "",
                        prompt,
                        t.completion,
                        t.completion_ids,
                        t.completion_logprobs,
                        r.value,
                        r.components,
                        r.flags,
                        float(advs[j]),
                        t.finish_reason,
                        id(g) in adv_of,
                        gi,
                    )
                )
        self.store.write(step, rows)
