"""Agent training pieces: step-credit advantages (hand-derived), curriculum, batches, expert data."""

import json

import pytest
import torch

from tempering.agents import training
from tempering.agents.credit import discounted_step_advantages, step_credit_advantages
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.tasks import builtin_tasks, select
from tempering.agents.training import (
    AgentRolloutSource,
    Curriculum,
    expert_conversations,
    expert_examples,
    step_rewards_tensor,
)
from tempering.config import GRPOSettings
from tempering.objectives.grpo_math import grpo_advantages
from tempering.types import IGNORE
from tests.agents.scripted_engine import PolicyEngine


def test_discounted_step_advantages_by_hand():
    # one group of two episodes; steps at positions 1 and 3 (episode 0) and 2 (episode 1)
    rewards = torch.tensor([[0.0, -0.1, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    step_mask = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    groups = torch.tensor([0, 0])
    # group statistics over its three step rewards {-0.1, 1.0, 0.0}: mean 0.3; Dr. GRPO (no std)
    # normalised: -0.4 at (0,1), 0.7 at (0,3), -0.3 at (1,2)
    out = discounted_step_advantages(rewards, step_mask, groups, gamma=0.5, estimator="dr_grpo")
    expected = torch.tensor([[-0.4 + 0.5 * 0.7, -0.4 + 0.5 * 0.7, 0.7, 0.7], [-0.3, -0.3, -0.3, 0.0]])
    assert torch.allclose(out, expected, atol=1e-6)
    plain = discounted_step_advantages(rewards, step_mask, groups, gamma=1.0, estimator="dr_grpo")
    assert torch.equal(plain, grpo_advantages(rewards, "dr_grpo", groups=groups, step_mask=step_mask))
    assert torch.allclose(plain[0], torch.tensor([0.3, 0.3, 0.7, 0.7]), atol=1e-6)


def test_curriculum_promotes_after_a_full_window_at_the_threshold():
    tasks = builtin_tasks("workspace")
    c = Curriculum(tasks, promote_at=0.75, window=4, seed=0)
    assert c.tier == 1 and {t.tier for t in c.sample(10)} == {1}
    c.record([(1, True), (1, True), (1, False)])  # window not full
    assert c.tier == 1
    c.record([(1, False)])  # 2/4 < 0.75
    assert c.tier == 1
    c.record([(1, True), (1, True), (1, True)])  # last four: F T T T = 0.75
    assert c.tier == 2 and len(c.recent) == 0
    state = c.state_dict()
    d = Curriculum(tasks, promote_at=0.75, window=4, seed=0)
    d.load_state_dict(state)
    assert d.tier == 2 and [t.id for t in d.sample(5)] == [t.id for t in c.sample(5)]


def test_curriculum_review_draws_passed_tiers_and_counts_only_the_current_one():
    # tool_arith after tier-1-only SFT, curriculum [2, 3]: promoted to tier 3 after 4-5 steps, then
    # 0 of 24 episodes solved a step and every group tied, so no step carried a gradient
    # (docs/agents.md); review keeps a share of each batch on the tiers passed
    tasks = select(builtin_tasks("workspace"), "train")
    c = Curriculum(tasks, promote_at=0.5, window=2, seed=0, review=0.5)
    assert {t.tier for t in c.sample(20)} == {1}  # nothing passed yet: the current tier only
    assert c.record([(1, True), (1, True)]) and c.tier == 2
    drawn = [t.tier for t in c.sample(400)]
    assert set(drawn) == {1, 2} and 0.4 < drawn.count(1) / 400 < 0.6
    assert not c.record([(1, True), (1, True), (2, False)])  # tier 1's successes do not count
    assert list(c.recent) == [False] and c.pass_rate == 0.0
    assert c.record([(2, True), (2, True)]) and c.tier == 3
    assert {t.tier for t in c.sample(400)} == {1, 2, 3}
    d = Curriculum(tasks, promote_at=0.5, window=2, seed=0, review=0.5)
    d.load_state_dict(c.state_dict())  # a resumed run continues every tier's draw order
    assert [t.id for t in d.sample(30)] == [t.id for t in c.sample(30)]
    plain = Curriculum(tasks, promote_at=0.5, window=2, seed=0)
    plain.record([(1, True), (1, True)])
    assert {t.tier for t in plain.sample(100)} == {2}  # review 0: the current tier only
    with pytest.raises(ValueError, match=r"review 1.0: expected a share in \[0, 1\)"):
        Curriculum(tasks, promote_at=0.5, window=2, seed=0, review=1.0)


def test_a_checkpoint_from_before_review_resumes_its_draw_order():
    tier1 = select(builtin_tasks("workspace"), "train", [1])[:12]
    c = Curriculum(tier1, promote_at=1.0, window=4, seed=3)
    c.sample(4)
    state = c.state_dict()
    old = {k: v for k, v in state.items() if k != "queues"} | {"queue": state["queues"][1]}
    d = Curriculum(tier1, promote_at=1.0, window=4, seed=3)
    d.load_state_dict(old)
    assert [t.id for t in d.sample(8)] == [t.id for t in c.sample(8)]


def test_expert_examples_train_only_the_assistant_turns(smol_tokenizer):
    renderer = AgentRenderer(smol_tokenizer)
    task = select(builtin_tasks("tool_arith"), "train")[0]
    conv = expert_conversations([task], renderer, None)[0]
    assert [m["role"] for m in conv] == ["system", "user", "assistant", "tool", "assistant"]
    ex = expert_examples([task], renderer, None)[0]
    trained = smol_tokenizer.decode([t for t in ex.labels if t != IGNORE])
    value = task.goal["value"]
    assert trained == (
        f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{task.prompt[8:-1]}"}}}}'
        f'</tool_call><|im_end|><tool_call>{{"name": "submit", "arguments": {{"answer": "{value}"}}}}'
        "</tool_call><|im_end|>"
    )
    # the prompt the SFT example starts with is exactly the one sampled episodes start with
    opening = renderer.prompt_ids([{"role": "user", "content": task.prompt}], task.tools)
    assert ex.input_ids[: len(opening)] == opening


def test_rollout_source_builds_grpo_batches_from_episodes(smol_tokenizer, tmp_path):
    renderer = AgentRenderer(smol_tokenizer)
    tasks = select(builtin_tasks("retry"), "train")[:4]

    calls = []

    def policy(task, messages):  # calls alternate wrong, right: see the rewards below
        calls.append(1)
        return "The answer is 99." if len(calls) % 2 else f"The answer is {task.goal['value']}."

    engine = PolicyEngine(smol_tokenizer, policy, tasks)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=20, dynamic_sampling=False)
    store = tmp_path / "trajectories.jsonl"
    source = AgentRolloutSource(
        tasks, engine, renderer, None, grpo, EpisodeSettings(), grad_accum=1, seed=0, store=store
    )
    source.on_weights(2, step=2)  # the trainer's weights: version 2
    batch = source.next_batch()
    assert batch.completion_ids.shape[0] == 4 and batch.prompt_ids.shape[0] == 2
    # the model's own turns are version 2; tool output and padding carry none (-1)
    assert torch.equal(batch.versions, torch.where(batch.loss_mask.bool(), 2, -1))
    episodes = [json.loads(line) for line in store.read_text().splitlines()]
    assert episodes and all(e["versions"] == [2 if m else -1 for m in e["loss_mask"]] for e in episodes)
    assert torch.equal(batch.loss_mask * (1 - batch.completion_mask), torch.zeros_like(batch.loss_mask))
    assert 0 < int(batch.loss_mask.sum()) < int(batch.completion_mask.sum())  # feedback turns masked
    # round 1 (4 episodes): wrong, right, wrong, right; round 2 (the two wrong ones): wrong, right;
    # round 3: wrong (third attempt). Rewards: group 0 [0, 1.0], group 1 [0.5, 1.0] -> advantages -1, 1
    assert torch.allclose(batch.advantages, torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-4)
    stats = source.stats()
    assert (stats["staleness_max"], stats["staleness_hist/0"]) == (0.0, int(batch.loss_mask.sum()))
    assert stats["groups"] == 2 and stats["success_rate"] == 0.75 and stats["reward_mean"] == pytest.approx(0.625)
    assert source.state_dict()["rollouts"] == 1


def test_earlier_turns_penalties_count_in_the_trajectory_advantage(smol_tokenizer):
    """An episode's reward is its turns' rewards summed: a penalised call at turn 1 (invalid here;
    `safe_actions`' unsafe calls are the same per-turn penalty) costs the episode even when it then
    succeeds. Before, only the last turn counted: both episodes scored 1.0 and the group tied."""
    renderer = AgentRenderer(smol_tokenizer)
    tasks = select(builtin_tasks("retry"), "train")[:4]
    calls = []

    def policy(task, messages):  # turn 0 alternates a call to a tool the task lacks, the answer
        calls.append(1)
        if not messages and len(calls) % 2:
            return '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
        return f"The answer is {task.goal['value']}."

    engine = PolicyEngine(smol_tokenizer, policy, tasks)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=30, dynamic_sampling=False)
    settings = EpisodeSettings(invalid_call_penalty=0.5)
    source = AgentRolloutSource(tasks, engine, renderer, None, grpo, settings, grad_accum=1, seed=0)
    batch = source.next_batch()
    # each group: [-0.5 (the invalid call), +1.0 (the answer)] -> 0.5, and [+1.0] -> 1.0
    assert torch.allclose(batch.advantages, torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-4)
    stats = source.stats()
    assert stats["success_rate"] == 1.0 and stats["reward_mean"] == pytest.approx(0.75)
    assert stats["invalid_calls"] == pytest.approx(0.5)


def test_curriculum_draws_every_task_of_the_tier_once_before_repeating():
    # with replacement, 2 RL steps of 4 tasks from 12 drew config-port in 5 of 8 groups and RL taught
    # read_file for every task (docs/agents.md): the draw is now an epoch over the tier
    tier1 = select(builtin_tasks("workspace"), "train", [1])[:12]  # a tier of 12 tasks
    assert len(tier1) == 12
    c = Curriculum(tier1, promote_at=1.0, window=4, seed=3)
    first = [t.id for t in c.sample(4)]
    assert len(set(first)) == 4
    state = c.state_dict()
    rest = [t.id for _ in range(2) for t in c.sample(4)]
    assert sorted(first + rest) == sorted(t.id for t in tier1)  # 12 draws: each task exactly once
    d = Curriculum(tier1, promote_at=1.0, window=4, seed=3)
    d.load_state_dict(state)  # a resumed run continues the same epoch
    assert [t.id for _ in range(2) for t in d.sample(4)] == rest
    assert len({t.id for t in c.sample(12)}) == 12  # the next epoch again covers the tier


def test_tied_groups_give_a_batch_without_gradient(smol_tokenizer):
    renderer = AgentRenderer(smol_tokenizer)
    tasks = select(builtin_tasks("retry"), "train")[:4]
    engine = PolicyEngine(smol_tokenizer, lambda task, messages: f"The answer is {task.goal['value']}.", tasks)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=20)  # dynamic_sampling on
    source = AgentRolloutSource(tasks, engine, renderer, None, grpo, EpisodeSettings(), grad_accum=1, seed=0)
    batch = source.next_batch()
    assert source.stats()["groups_kept"] == 0 and source.stats()["success_rate"] == 1.0
    assert torch.equal(batch.advantages, torch.zeros(2))  # every reward 1: the loss -ratio * A is 0
    assert torch.equal(batch.sampled_mask, batch.loss_mask)  # the mismatch skips environment tokens


def test_step_credit_through_the_source_matches_the_whole_batch_computation(smol_tokenizer, monkeypatch):
    """Per-token advantages are built group by group and padded to the batch width: the same
    numbers as normalising the whole batch's step rewards at once (groups never mix)."""
    renderer = AgentRenderer(smol_tokenizer)
    tasks = select(builtin_tasks("retry"), "train")[:4]
    calls = []

    def policy(task, messages):
        calls.append(1)
        return "The answer is 99." if len(calls) % 3 else f"The answer is {task.goal['value']}."

    sampled = []

    def rollout(*args, **kwargs):  # the episodes the source gets (all scored: every group is kept)
        sampled.append(agent_rollout(*args, **kwargs))
        return sampled[-1]

    monkeypatch.setattr(training, "agent_rollout", rollout)
    engine = PolicyEngine(smol_tokenizer, policy, tasks)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=20, dynamic_sampling=False)
    source = AgentRolloutSource(
        tasks, engine, renderer, None, grpo, EpisodeSettings(), grad_accum=1, seed=0, credit="step", gamma=0.9
    )
    batch = source.next_batch()
    groups = sampled[0].groups
    width = batch.completion_ids.shape[1]
    prompts = [g[0].trajectory.prompt_length for g in groups]
    shaping = [source.shaping(ep) for g in groups for ep in g]
    rewards, step_mask = step_rewards_tensor(groups, width, prompts, shaping)
    ids = torch.arange(len(groups)).repeat_interleave(len(groups[0]))
    outcome = torch.tensor([ep.trajectory.reward.value for g in groups for ep in g])
    expected = step_credit_advantages(outcome, rewards, step_mask, ids, weight=0.25, gamma=0.9)
    assert batch.advantages.shape == (4, width) and step_mask.sum() > 4  # several turns per episode
    assert torch.allclose(batch.advantages * batch.completion_mask, expected * batch.completion_mask, atol=1e-6)
