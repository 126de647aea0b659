"""The asynchronous orchestrator (`rollout/orchestrator.py`): no trained token older than K versions
whatever the sampler's and trainer's pace, truthful version stamps, the bound's drops counted, the
stale tokens' importance ratio against the engine's recorded log-probs, and exact checkpoints."""

import copy
import random
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tempering.config import GRPOSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.objectives import policy_losses
from tempering.objectives.grpo import GRPOObjective
from tempering.rollout.engine import Completion, HFEngine
from tempering.rollout.source import RolloutSource
from tempering.types import Task
from tempering.versions import NOT_SAMPLED
from tests.conftest import tiny_llama

TASKS = [Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": "1"}, source="t") for i in range(8)]


class VersionModel(torch.nn.Module):
    """A trainer 'model' whose one weight is its version: an engine synced from it knows which it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


class SlowEngine:
    """An engine with its own weights that sleeps a random while per call and writes the version its
    weights hold into every log-prob it returns (-version - 1), so a sample tells who sampled it."""

    precision, identity = "fp32", "fake"

    def __init__(self, delays: random.Random, max_delay: float):
        self.delays, self.max_delay, self.held = delays, max_delay, -1
        self.lock = threading.Lock()

    def chat_prompt(self, messages):
        return [1, 2]

    def sync_weights(self, weights):
        state = dict(weights.named_parameters()) if hasattr(weights, "named_parameters") else weights
        self.held = int(state["w"].item())

    def generate(self, prompts, params):
        with self.lock:  # one caller at a time (the sampler thread; the assertion below would catch two)
            time.sleep(self.delays.uniform(0, self.max_delay))
            held = self.held
            return [
                [Completion(i, [3, 4], [-held - 1.0] * 2, "1", "stop") for _ in range(params.n)]
                for i in range(len(prompts))
            ]


def _source(engine, model, K, grad_accum=2, **extra):
    s = GRPOSettings(
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=2,
        dynamic_sampling=False,
        max_off_policy_steps=K,
        generation_chunks=1,
        reward_workers=1,
        **extra,
    )
    return RolloutSource(TASKS, engine, s, grad_accum=grad_accum, seed=0, model=model)


def _update(model, version):
    with torch.no_grad():
        model.w.fill_(version)


@settings(max_examples=8, deadline=None)
@given(K=st.integers(1, 3), seed=st.integers(0, 1000), rollbacks=st.sets(st.integers(1, 9), max_size=2))
def test_no_trained_token_is_older_than_K_and_every_stamp_is_the_syncing_weights(K, seed, rollbacks):
    """Random sampler and trainer pace. `rollbacks` plants an extra version after those steps (a
    rollback gives the sampler new weights without a batch), so batches sampled ahead of it reach the
    trainer more than K versions old: those groups are dropped and counted."""
    pace = random.Random(seed)
    model = VersionModel()
    source = _source(SlowEngine(random.Random(seed + 1), 0.004), model, K)
    version, at_take, sampled_from, dropped = 0, [], [], 0.0
    try:
        for step in range(1, 11):
            at_take.append(version)
            batches = [source.next_batch() for _ in range(2)]  # one group each: rollout batch step - 1
            seen = set()
            for b in batches:
                if b.n_real_tokens == 0:
                    continue
                sampled = b.versions[b.sampled_mask.bool()]
                assert bool((sampled >= 0).all()) and bool((b.versions[~b.sampled_mask.bool()] == NOT_SAMPLED).all())
                assert int((version - sampled).max()) <= K  # never older than K versions where it trains
                # the stamp is the version of the weights the engine held: it wrote them into the log-probs
                mask = b.completion_mask.bool()
                assert torch.equal(b.engine_logprobs[mask], (-b.versions[mask] - 1).float())
                seen |= set(sampled.tolist())
            sampled_from.append(seen)
            dropped += source.stats().get("stale_dropped_groups", 0.0)
            time.sleep(pace.uniform(0, 0.004))  # the trainer's update
            version += 1 + (step in rollbacks)
            _update(model, version)
            source.on_weights(version, step)
    finally:
        source.close()
    # the gate's rule: batch i samples from the weights of when batch i - K was taken
    pinned = [at_take[max(i - K, 0)] for i in range(10)]
    too_old = [at_take[i] - pinned[i] > K for i in range(10)]
    assert sampled_from == [set() if old else {pinned[i]} for i, old in enumerate(too_old)]
    assert dropped == 2 * sum(too_old)  # two groups a batch


def test_a_planted_rollback_drops_exactly_the_groups_sampled_before_it():
    """K = 2, a rollback after step 3 (versions 0, 1, 2, 3, then 5): batch 4 was sampled from version 1
    (gate: batch i pins the weights of when batch i - K was taken) and trains at version 5, 4 old: its
    two groups are dropped and counted; batch 5 (version 2, trained at 6) likewise; batch 6 (version 5,
    pinned after the rollback) trains at 7, 2 old: kept."""
    model = VersionModel()
    source = _source(SlowEngine(random.Random(0), 0.0), model, K=2, grad_accum=1)
    version, log = 0, []
    try:
        for step in range(1, 8):
            batch = source.next_batch()
            stats = source.stats()
            sampled = batch.versions[batch.sampled_mask.bool()] if batch.n_real_tokens else torch.tensor([])
            log.append((version, sorted(set(sampled.tolist())), stats["stale_dropped_groups"]))
            version += 2 if step == 4 else 1
            _update(model, version)
            source.on_weights(version, step)
    finally:
        source.close()
    assert log == [
        (0, [0], 0.0),
        (1, [0], 0.0),
        (2, [0], 0.0),
        (3, [1], 0.0),
        (5, [], 2.0),  # batch 4, sampled from 2 (pinned when batch 2 was taken), 3 old: dropped
        (6, [], 2.0),  # sampled from 3, 3 old: dropped
        (7, [5], 0.0),
    ]
