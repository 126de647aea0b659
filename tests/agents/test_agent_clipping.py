"""Agent GRPO with updates_per_batch > 1: the repeats of a rollout batch see the rollout policy's log-probs."""

import torch

from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings
from tempering.agents.tasks import builtin_tasks, select
from tempering.agents.training import AgentRolloutSource
from tempering.config import GRPOSettings
from tempering.objectives.grpo import GRPOObjective
from tests.agents.scripted_engine import PolicyEngine
from tests.conftest import tiny_llama


def test_the_agents_second_update_on_a_rollout_batch_clips(smol_tokenizer):
    """mu = 2: the second update's ratio p_now / p_rollout moves off 1 and the clip acts.

    Without the rollout policy's log-probs in the batch the objective falls back to
    logp.detach(): every repeat has ratio exactly 1 and the clip never acts."""
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    renderer = AgentRenderer(smol_tokenizer)
    tasks = select(builtin_tasks("retry"), "train")[:4]
    calls = []

    def policy(task, messages):  # wrong, right, wrong, right: rewards differ within each group
        calls.append(1)
        return "The answer is 99." if len(calls) % 2 else f"The answer is {task.goal['value']}."

    engine = PolicyEngine(smol_tokenizer, policy, tasks)
    grpo = GRPOSettings(
        prompts_per_step=2, group_size=2, max_new_tokens=20, dynamic_sampling=False, updates_per_batch=2
    )
    source = AgentRolloutSource(
        tasks, engine, renderer, None, grpo, EpisodeSettings(), grad_accum=1, seed=0, model=model, precision="fp32"
    )
    objective = GRPOObjective(grpo)
    optimizer = torch.optim.SGD(model.parameters(), lr=50.0)
    first = source.next_batch()
    loss, stats = objective.loss(model, first)
    assert abs(stats["ratio_mean"] - 1.0) < 1e-4  # the first update: the current policy sampled
    loss.backward()
    optimizer.step()
    second = source.next_batch()  # the same rollout batch, served again
    _, stats = objective.loss(model, second)
    assert abs(stats["ratio_mean"] - 1.0) > 1e-3
    assert stats["clip_fraction"] > 0
