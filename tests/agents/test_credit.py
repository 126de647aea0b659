"""Step credit (hand-derived numbers), the signals the rollout records per turn, group filtering
with refills, and the curriculum's tiers."""

import math

import pytest
import torch

from tempering.agents.credit import (
    TurnSignals,
    failing_tests,
    shaping_rewards,
    step_credit_advantages,
    turn_signals,
)
from tempering.agents.policies import oracle_text, recover
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.tasks import builtin_tasks, select
from tempering.agents.training import AgentRolloutSource, Curriculum
from tempering.config import GRPOSettings, SamplingSettings
from tests.agents.scripted_engine import PolicyEngine


def test_failing_tests_reads_the_last_unittest_summary():
    assert failing_tests("....\nRan 4 tests in 0.001s\n\nOK\n") == 0
    assert failing_tests("F.E\nRan 3 tests in 0.01s\n\nFAILED (failures=1, errors=1)\n") == 2
    assert failing_tests("Ran 3 tests in 0.01s\n\nFAILED (errors=3, skipped=1)\n") == 3
    assert failing_tests("hello\nOK\n") is None  # no "Ran N tests": not a test run


def test_turn_signals_are_the_counter_deltas_and_the_test_output():
    before = {"tool_calls": 2, "invalid_calls": 1, "tool_errors": 0, "wrong_answers": 0}
    after = {"tool_calls": 3, "invalid_calls": 2, "tool_errors": 1, "wrong_answers": 0}
    obs = [{"role": "tool", "content": "Ran 2 tests in 0.0s\n\nFAILED (failures=2)"}]
    assert turn_signals(before, after, obs) == TurnSignals(calls=1, invalid=1, errors=2, failing_tests=2)


def test_shaping_rewards_by_hand():
    signals = [
        TurnSignals(invalid=1, errors=1),  # a malformed call: -valid
        TurnSignals(calls=1),  # valid, right after an error: +valid +recovered
        TurnSignals(calls=1, errors=1, failing_tests=2),  # its test run fails 2 (first run: no progress)
        TurnSignals(calls=1, failing_tests=0),  # valid, recovered, and fewer failing tests
    ]
    assert shaping_rewards(signals, valid=0.5, recovered=1.0, progress=2.0) == [-0.5, 1.5, 0.5, 3.5]


def test_step_credit_advantages_by_hand():
    # one group of two episodes over 3 completion positions; Dr. GRPO (centred, no std)
    outcome = torch.tensor([1.0, 0.0])  # centred: +0.5, -0.5 on every token
    shaping = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    step_mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    # the group's step rewards {1, 0, -1}: mean 0; reverse sums: ep0 [1, 0, 0], ep1 [-1, -1, 0]
    out = step_credit_advantages(outcome, shaping, step_mask, torch.tensor([0, 0]), weight=0.2, estimator="dr_grpo")
    assert torch.allclose(out, torch.tensor([[0.7, 0.5, 0.5], [-0.7, -0.7, -0.5]]), atol=1e-6)
    # a large shaping reward is clipped: {3, 0, -1} has mean 2/3, so ep0's first token would get 7/3
    big = step_credit_advantages(
        outcome,
        shaping * torch.tensor([[3.0], [1.0]]),
        step_mask,
        torch.tensor([0, 0]),
        weight=0.2,
        estimator="dr_grpo",
    )
    assert big[0, 0].item() == pytest.approx(0.5 + 0.2 * 1.0)
    with pytest.raises(ValueError, match="outcome dominates"):
        step_credit_advantages(outcome, shaping, step_mask, torch.tensor([0, 0]), weight=1.0)


def test_the_outcome_dominates_step_credit():
    # GRPO, G = 4, one success: outcome advantages sqrt(3) and -1/sqrt(3); every token of the success
    # stays above every token of a failure however the turns are credited (weight 0.9 < 1)
    outcome = torch.tensor([1.0, 0.0, 0.0, 0.0])
    shaping = torch.tensor([[-5.0, 0.0], [0.0, 5.0], [5.0, 5.0], [1.0, 0.0]])
    step_mask = torch.ones(4, 2)
    out = step_credit_advantages(outcome, shaping, step_mask, torch.zeros(4, dtype=torch.long), weight=0.9)
    assert out[0].max() <= math.sqrt(3) + 0.9 + 1e-5 and out[0].min() >= math.sqrt(3) - 0.9 - 1e-5
    assert out[0].min() > out[1:].max()


def test_the_rollout_records_each_turns_signals(smol_tokenizer):
    tasks = select(builtin_tasks("tool_arith"), "train")[:1]
    engine = PolicyEngine(smol_tokenizer, recover, tasks)
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=80)
    (episode,) = agent_rollout(tasks, engine, AgentRenderer(smol_tokenizer), None, sampling, n=1, seed=0).groups[0]
    assert episode.stats.recovered
    assert [t.signals for t in episode.turns] == [
        TurnSignals(invalid=1, errors=1),
        TurnSignals(calls=1),
        TurnSignals(calls=1),
    ]
    source = AgentRolloutSource(
        tasks, engine, AgentRenderer(smol_tokenizer), None, GRPOSettings(), EpisodeSettings(), 1, 0, credit="step"
    )
    assert source.shaping(episode) == [-0.5, 1.5, 0.5]  # defaults valid 0.5, recovered 1.0


def test_tied_groups_are_dropped_and_refilled_with_new_tasks(smol_tokenizer):
    tasks = select(builtin_tasks("tool_arith"), "train", [1])[:4]
    mixed = tasks[0].id  # the only task whose two episodes differ: one wrong answer, one right
    turns = []

    def policy(task, messages):
        if task.id != mixed:
            return f"The answer is {task.goal['value']}."  # always right: its groups tie
        turns.append(task.id)
        return "The answer is 0." if len(turns) % 2 else oracle_text(task, 1)  # the expert's submit

    engine = PolicyEngine(smol_tokenizer, policy, tasks)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=60)  # dynamic_sampling on
    source = AgentRolloutSource(
        tasks, engine, AgentRenderer(smol_tokenizer), None, grpo, EpisodeSettings(), 1, 0, max_refills=8
    )
    batch = source.next_batch()
    stats = source.stats()
    assert stats["groups_tied"] >= 1 and stats["refill_rounds"] >= 1
    assert stats["groups"] == stats["groups_tied"] + stats["groups_kept"] + stats["groups_env_error"]
    assert stats["groups_kept"] == 2 and stats["all_groups_tied"] == 0
    assert torch.allclose(batch.advantages.abs(), torch.ones(4), atol=1e-4)  # only informative groups
    assert set(source.consumed()) == {t.id for t in tasks}  # the refills drew the tier's other tasks


def test_the_curriculum_takes_its_tiers_from_the_config_and_refuses_others():
    tasks = select(builtin_tasks("workspace"), "train")
    with pytest.raises(ValueError, match=r"tier 3 is outside the curriculum \[1, 2\]"):
        Curriculum(tasks, promote_at=0.5, window=2, seed=0, tiers=[1, 2])
    with pytest.raises(ValueError, match="tier 4 has no training task"):
        Curriculum(tasks, promote_at=0.5, window=2, seed=0, tiers=[1, 2, 3, 4])
    c = Curriculum(tasks, promote_at=0.5, window=2, seed=0, tiers=[2, 1, 3])  # order as given
    assert c.tier == 2 and c.record([(2, True), (2, False)]) and c.tier == 1 and c.pass_rate == 0.0
    d = Curriculum(select(tasks, "train", [1]), promote_at=0.5, window=2, seed=0)
    with pytest.raises(ValueError, match="curriculum is at level 1"):
        d.load_state_dict(c.state_dict())
