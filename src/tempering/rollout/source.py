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
     hands the groups to the one GRPO batch builder (`rollout.grpo_batches`, shared with agent
     RL): `grad_accum` micro-batches (`GRPOBatch`), served `updates_per_batch` times.

Sampling is seeded by (seed, rollout index, round), so a resumed run draws what an
uninterrupted one would have drawn from the same weights.

Every sample is stamped with the policy version of the weights the engine holds (`on_weights`,
which the Trainer calls after each weight change; `tempering.versions`), and each step logs the
staleness of the tokens it trains on (`staleness_mean`, `staleness_max`, `staleness_hist/<k>`).

Steps 1-3 go through the orchestrator (`rollout.orchestrator`): inline with
`max_off_policy_steps` K = 0; with K > 0 (an engine with its own copy of the weights: a local
engine process or Ray replicas) one sampler thread samples up to K batches ahead while the
trainer updates, each from weights at most K updates older than those it trains (logged as
`staleness`); a batch sampled from older weights than the trainer's carries the engine's
log-probs as `old_logprobs`, so the clipped importance ratio p_train / p_rollout corrects for
the stale policy.

The staleness bound is enforced as each micro-batch is handed to the trainer (`next_batch`): a
group holding a token more than K steps older than the trainer's weights (K + mu - 1 with a
batch served mu times) is dropped whole and counted (`stale_dropped_groups`, `_share`). The
orchestrator's gate never trips it; a rollback (a new version without a batch) can.

The engine is synced through `sync_to`, the one place this source syncs: with an engine holding its own
copy of the weights, it runs the weight-sync check when due (`rollout/sync_check.py`). With
`partial_rollouts`, generation runs in segments (`rollout/partial.py`) and `newer_weights`, called between
them, is where an orchestrator that publishes weights mid-batch syncs them (docs/rl.md, Partial rollouts).

Crash at any step, lose nothing: a checkpoint resumes exactly (the same prompts in the same
order, the same samples from the same weights) because
  - it is taken only between rollout batches (`at_boundary`; the Trainer defers a due
    checkpoint until then): the later updates of a batch served `updates_per_batch` times
    need that batch's samples and old log-probs, which a resume could not draw again from
    the updated weights. A kill mid-batch resumes from the batch's start and redoes it.
    (The final checkpoint of a run is written wherever it ends; extending such a run later
    starts at the next rollout batch.)
  - with K > 0, the batches sampled ahead when the checkpoint is taken (up to K) are waited for
    and recorded in the checkpoint (`state_dict()["ahead"]`: a list of their tasks, scored
    trajectories and sampling version): they were sampled from weights before the last update,
    which a resume no longer has, so they are not sampled again but trained on as recorded. A
    checkpoint therefore costs the overlap of the batch sampling then.
`consumed()` reports the task ids each batch drew (the run's `consumed.jsonl`).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from rich.console import Console

from tempering.batches import GRPOBatch
from tempering.config import GRPOSettings
from tempering.data.images import content_text
from tempering.errors import UserError
from tempering.objectives.advantages import overlong_penalty
from tempering.objectives.grpo_math import grpo_advantages
from tempering.rollout.domains import DomainSchedule, domain_metrics
from tempering.rollout.engine import Engine
from tempering.rollout.grpo_batches import (
    GroupRows,
    drop_stale_groups,
    grpo_micro_batches,
    old_logprobs_for,
    served_versions,
)
from tempering.rollout.orchestrator import Orchestrator
from tempering.rollout.partial import SegmentedEngine
from tempering.rollout.rollout import RewardWorkers, ThreadRewardWorkers, start_rollout
from tempering.rollout.roundtrip import ROUNDTRIP_FLAG, roundtrip_ok
from tempering.rollout.store import TrajectoryRow, TrajectoryStore
from tempering.rollout.sync_check import SyncCheck, shares_model
from tempering.types import Task, Trajectory
from tempering.verifiers.answers import NO_ANSWER
from tempering.versions import Version, VersionClock, stamp


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


console = Console(stderr=True)

Sampled = tuple[int, list[Group], list[Group], Counter, float, float]
"""One sampled batch: (rollout index, groups seen, groups kept, filter counts, generation s, scoring s)."""


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
        tokenizer: Any = None,
        schedule: DomainSchedule | None = None,
    ):
        if not tasks:
            raise UserError("GRPO needs at least one training task")
        self.tasks, self.engine, self.s = tasks, engine, settings
        self.grad_accum, self.seed, self.store = grad_accum, seed, store
        self.model, self.precision = model, precision
        self.tokenizer = tokenizer  # for the token round-trip check of every sample (None: not checked)
        self._old_logprobs = old_logprobs_for(model, precision, settings.temperature, settings.updates_per_batch)
        if workers is None:
            workers = ThreadRewardWorkers(
                settings.reward_workers, None, settings.verifier_timeout_s, settings.hang_grace_s
            )
        self.workers = workers
        self.order = list(range(len(tasks)))
        random.Random(seed).shuffle(self.order)
        self.cursor = 0
        self.rollouts = 0
        self.buffer: list[GRPOBatch] = []
        self._stats: dict[str, float] = {}
        self._prompt_cache: dict[str, list[int]] = {}
        self._drawn: list[str] = []  # task ids of the batches handed to the trainer since `consumed()`
        self.orchestrator = Orchestrator(self._sample, self.sync_to, engine, model, settings.max_off_policy_steps)
        self.schedule = schedule  # multi-domain: which domain each prompt comes from (None: one domain)
        self._events: list[dict[str, Any]] = []  # the schedule's events (paused, retried) not yet reported
        # the schedule is drawn from and told verdicts on the sampler thread, read for metrics on the trainer's
        self._schedule_lock = threading.Lock()
        self.clock = VersionClock()  # the trainer's weights version: stamps samples, measures staleness
        # the staleness bound where a batch trains: K, or the repeats of a batch served mu times (K = 0)
        self.bound = settings.max_off_policy_steps + settings.updates_per_batch - 1
        self.engine_version: Version = 0  # the weights the engine holds (`sync_to`)
        own_copy = model is not None and not shares_model(engine, model)  # else: nothing to sync or check
        self._check = SyncCheck(settings.sync_check_every, precision, settings.temperature, seed) if own_copy else None

    # -- BatchSource -------------------------------------------------------------------
    def next_batch(self) -> GRPOBatch:
        if not self.buffer:
            micro = self._rollout_batch()
            self.buffer = [b for _ in range(self.s.updates_per_batch) for b in micro]
        batch, groups, dropped = drop_stale_groups(self.buffer.pop(0), self.clock.version, self.bound)
        self.clock.judged(groups, dropped)
        self.clock.served(served_versions(batch))
        return batch

    def on_weights(self, version: Version, step: int) -> None:
        """The trainer's weights changed (or were restored): samples drawn from now on are `version`'s."""
        self.clock.on_weights(version, step)
        self.orchestrator.publish(version)
        if self.orchestrator.K > 0 and self._check is not None and self._check.due(step):
            # the sampler syncs pinned snapshots, which the trainer no longer holds: check this sync here,
            # with the engine borrowed between two of its batches (the next one re-syncs its pin)
            with self.orchestrator.borrowed_engine():
                self.sync_to(self.model, version, step)

    @property
    def at_boundary(self) -> bool:
        """Whether a checkpoint taken now resumes exactly: no update of the current batch is left."""
        return not self.buffer

    def state_dict(self) -> dict:
        ahead = self.orchestrator.pending()  # waits for the batches sampling in the background
        state: dict[str, Any] = {"cursor": self.cursor, "rollouts": self.rollouts}
        if self.schedule is not None:
            state["domains"] = self.schedule.state_dict()
        if ahead:
            state["ahead"] = [sampled_to_json(sampled) | {"version": v} for sampled, v in ahead]
        return state

    def load_state_dict(self, state: dict) -> None:
        self.cursor, self.rollouts = state["cursor"], state["rollouts"]
        if self.schedule is not None:
            if "domains" not in state:
                raise UserError("the checkpoint was written without domains; resume with the config it started with")
            self.schedule.load_state_dict(state["domains"])
        ahead = state.get("ahead", [])
        ahead = [ahead] if isinstance(ahead, dict) else ahead  # written by the one-step-ahead sampler: one batch
        self.orchestrator.restore([(sampled_from_json(a), sampled_version(a)) for a in ahead])
        self.buffer = []  # a resume starts at the next rollout batch

    def consumed(self) -> list[str]:
        """Task ids of the rollout batches handed out since the last call (refills included), in draw order."""
        out, self._drawn = self._drawn, []
        return out

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._stats) | self.clock.metrics()
        if self._check is not None:
            out |= self._check.metrics()
        with self._schedule_lock:
            if self._events:  # reported once, with the step that follows the batch that raised them
                out["domain_events"], self._events = self._events, []
        return out

    def close(self) -> None:
        self.orchestrator.close()
        self.workers.close()

    # -- one rollout batch ---------------------------------------------------------------
    def _next_tasks(self, n: int) -> list[Task]:
        if self.schedule is not None:
            with self._schedule_lock:
                return self.schedule.draw(n)
        out = []
        for _ in range(n):
            out.append(self.tasks[self.order[self.cursor % len(self.order)]])
            self.cursor += 1
        return out

    def _prompt(self, task: Task) -> list[int]:
        if task.id not in self._prompt_cache:
            self._prompt_cache[task.id] = self.engine.chat_prompt(task.chat())
        return self._prompt_cache[task.id]

    def _generate_and_score(
        self, tasks: list[Task], index: int, round_: int, version: Version
    ) -> tuple[list[Group], float, float]:
        """One rollout round; each generation chunk is scored while the next generates."""
        s = self.s
        engine: Engine = self.engine
        if s.partial_rollouts:  # segments; the engine may take newer weights between them
            decode = None if self.tokenizer is None else partial(self.tokenizer.decode, skip_special_tokens=False)
            engine = SegmentedEngine(engine, s.segment_tokens, self.newer_weights, version, decode)
        seed = hash((self.seed, index, round_)) % 2**31
        per = max(1, math.ceil(len(tasks) / s.generation_chunks))
        chunks = [(range(start, min(start + per, len(tasks))), seed + start) for start in range(0, len(tasks), per)]
        t0 = time.perf_counter()
        pending = start_rollout(
            tasks, engine, s, self.workers, n=s.group_size, prompts=[self._prompt(t) for t in tasks], chunks=chunks
        )
        groups = [Group(t, trajs) for t, trajs in zip(tasks, pending.collect(s.verifier_timeout_s))]
        return groups, pending.gen_s, time.perf_counter() - t0 - pending.gen_s

    def _apply_truncation(self, group: Group) -> None:
        s = self.s
        for t in group.trajectories:
            if not t.scored:
                continue
            r = t.reward
            if s.truncation == "penalty" and t.truncated:
                r = r.model_copy(update={"value": s.truncation_reward, "flags": r.flags + ["truncated"]})
            if s.overlong_buffer is not None:  # DAPO's soft overlong punishment, on top
                shaped = overlong_penalty(
                    len(t.completion_ids), s.max_new_tokens, s.overlong_buffer, s.overlong_penalty
                )
                r = r.model_copy(update={"value": r.value + shaped})
            t.rewards[-1] = r

    def _check_roundtrip(self, group: Group) -> None:
        """Flag the samples whose text re-encodes to other ids (`rollout/roundtrip.py`)."""
        if self.tokenizer is None:
            return
        for t in group.trajectories:
            if not roundtrip_ok(self.tokenizer, t.completion_ids):
                r = t.reward
                t.rewards[-1] = r.model_copy(update={"flags": r.flags + [ROUNDTRIP_FLAG]})

    def _rollout_batch(self) -> list[GRPOBatch]:
        """The next batch's micro-batches, from the orchestrator (sampled now with K = 0)."""
        sampled, version = self.orchestrator.take()
        self._drawn += [g.task.id for g in sampled[1]]
        return self._build(*sampled, staleness=self.clock.version - version)

    def sync_to(self, weights: Any, version: Version, step: int | None = None) -> None:
        """Sync `weights` (the trainer's model, or a published snapshot of its trainable tensors), which
        hold `version`, into the engine: the one place this source syncs (the orchestrator calls it).
        When `weights` is the model itself (the trainer's thread, between updates: it still holds
        `version`) and a check is due, check the sync (`rollout/sync_check.py`); a snapshot is not checked."""
        self.engine.sync_weights(weights)
        self.engine_version = version
        step = self.clock.step if step is None else step
        if self._check is not None and weights is self.model and self._check.due(step):
            prompt = self._prompt(self.tasks[self.order[0]])
            self._check.after_sync(self.engine, weights, prompt, version, step)

    def newer_weights(self) -> Version:
        """Partial rollouts' hook, called on the sampling thread between segments: the newest weights
        the trainer published, synced into the engine when it holds older ones (K > 0: the
        orchestrator's); returns the version the engine holds now, which the next segment's tokens
        are stamped with. With K = 0 nothing is published while a batch generates."""
        return self.orchestrator.newer_weights() if self.orchestrator.K > 0 else self.engine_version

    def _sample(self, version: Version | None = None) -> Sampled:
        """Steps 1-3: sample, score and filter one batch (engine and reward workers only, no model:
        the orchestrator may run it on its sampler thread); its tokens are stamped `version`
        (default: the trainer's current one), the weights the engine holds."""
        version = self.clock.version if version is None else version
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
            groups, g, v = self._generate_and_score(self._next_tasks(need), index, round_, version)
            for t in (t for group in groups for t in group.trajectories):
                if t.versions is None:  # partial rollouts stamp each segment's tokens themselves
                    t.versions = stamp(t.loss_mask, version)
            gen_s, score_s = gen_s + g, score_s + v
            for group in groups:
                self._apply_truncation(group)
                self._check_roundtrip(group)
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
        if self.schedule is not None:
            self._observe(index, seen)
        self.rollouts += 1
        return index, seen, kept[: s.prompts_per_step], counts, gen_s, score_s

    def _observe(self, index: int, seen: list[Group]) -> None:
        """The batch's verdicts by domain into the schedule; its health events warned about and kept."""
        assert self.schedule is not None
        by_domain: dict[str, list[Trajectory]] = defaultdict(list)
        for g in seen:
            by_domain[self.schedule.domain_of[g.task.id]] += g.trajectories
        with self._schedule_lock:
            events = self.schedule.observe(index, by_domain)
        for e in events:
            if "warning" in e:
                console.print(f"[bold yellow]warning: {e['warning']}[/bold yellow]")
        with self._schedule_lock:
            self._events += events

    def _build(
        self,
        index: int,
        seen: list[Group],
        kept: list[Group],
        counts: Counter,
        gen_s: float,
        score_s: float,
        staleness: int,
    ) -> list[GRPOBatch]:
        """Step 4: advantages, the trajectory store and the micro-batches of a sampled batch."""
        rewards = torch.tensor([g.values for g in kept], dtype=torch.float32)
        advantages = grpo_advantages(rewards, self.s.advantage, domains=self._domain_ids(kept))
        step = index * self.s.updates_per_batch + 1
        self._record(seen, kept, advantages, counts, gen_s, score_s, step)
        self._stats["staleness"] = staleness
        rows = [self._rows(g, advantages[i]) for i, g in enumerate(kept)]
        if staleness:  # the old policy is the one that sampled: the engine's log-probs
            return grpo_micro_batches(rows, self.grad_accum, lambda b: b.engine_logprobs.clone())
        return grpo_micro_batches(rows, self.grad_accum, self._old_logprobs)

    def _domain_ids(self, groups: list[Group]) -> torch.Tensor | None:
        """Each group's domain as an index into the schedule's domains (None: one domain)."""
        if self.schedule is None:
            return None
        index = {name: i for i, name in enumerate(self.schedule.names)}
        return torch.tensor([index[self.schedule.domain_of[g.task.id]] for g in groups], dtype=torch.long)

    # -- tensors -------------------------------------------------------------------------
    def _rows(self, group: Group, advantages: torch.Tensor) -> GroupRows:
        """A group for the batch builder: every completion token sampled; truncation "mask" drops cut rows."""
        masked = self.s.truncation == "mask"
        loss = [[0 if masked and t.truncated else 1] * len(t.completion_ids) for t in group.trajectories]
        sampled = [[1] * len(t.completion_ids) for t in group.trajectories]
        pixels = getattr(self._prompt(group.task), "pixels", {})  # an image prompt's, as the engine took them
        return GroupRows(group.prompt_ids, group.trajectories, loss, sampled, advantages, pixels)

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
            "roundtrip_mismatch_rate": sum(ROUNDTRIP_FLAG in r.flags for _, _, r in samples) / len(samples),
            "parse_failure_rate": sum(NO_ANSWER in r.flags for _, _, r in samples) / len(samples),
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
        if self.schedule is not None:
            domain_of = self.schedule.domain_of
            by_domain: dict[str, list[Trajectory]] = defaultdict(list)
            for g in seen:
                by_domain[domain_of[g.task.id]] += g.trajectories
            kept_by = Counter(domain_of[g.task.id] for g in kept)
            stats.update(domain_metrics(by_domain, kept_by, gen_s + score_s))
            with self._schedule_lock:
                stats.update(self.schedule.stats())
        self._stats = stats
        if self.store is None:
            return
        adv_of = {id(g): advantages[i].tolist() for i, g in enumerate(kept)}
        rows = []
        for gi, g in enumerate(seen):
            advs = adv_of.get(id(g), [0.0] * len(g.trajectories))
            prompt = g.task.prompt or content_text(g.task.chat()[-1].get("content"))
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
                        t.completion_versions,
                    )
                )
        self.store.write(step, rows)


def sampled_to_json(sampled: Sampled) -> dict[str, Any]:
    """A sampled batch as plain JSON (floats round-trip exactly): what a checkpoint records of a prefetched batch."""
    index, seen, kept, counts, gen_s, score_s = sampled
    position = {id(g): i for i, g in enumerate(seen)}
    return {
        "index": index,
        "seen": [
            {
                "task": g.task.model_dump(mode="json"),
                "trajectories": [t.model_dump(mode="json") for t in g.trajectories],
            }
            for g in seen
        ],
        "kept": [position[id(g)] for g in kept],
        "counts": dict(counts),
        "gen_s": gen_s,
        "score_s": score_s,
    }


def sampled_version(data: dict[str, Any]) -> Version:
    """The version that sampled a recorded batch: recorded beside it, else (a checkpoint of the
    one-step-ahead sampler) the version its tokens were stamped with."""
    if "version" in data:
        return data["version"]
    stamped = [v for g in data["seen"] for t in g["trajectories"] for v in t.get("versions") or []]
    return max(stamped, default=0)


def sampled_from_json(data: dict[str, Any]) -> Sampled:
    seen = [
        Group(Task.model_validate(g["task"]), [Trajectory.model_validate(t) for t in g["trajectories"]])
        for g in data["seen"]
    ]
    kept = [seen[i] for i in data["kept"]]
    return data["index"], seen, kept, Counter(data["counts"]), data["gen_s"], data["score_s"]
