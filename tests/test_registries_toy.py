"""Registries that reach the config: a task source, a goal kind and an environment
class, each with its own settings, registered from ONE new module (`tests/fixtures/registries_toy/
toy_kinds.py`) with no edit to `tempering/config/` or anywhere else, then validated from YAML and
run end to end on something tiny.
"""

import importlib
import json
import sys

import pytest

from tempering.agents.config import AgentConfig
from tempering.agents.goals import GOALS, check_goal
from tempering.agents.tasks import TaskFileError, load_agent_tasks
from tempering.agents.tools import ToolContext
from tempering.config import ConfigError, GRPOConfig, load_config
from tempering.config.tasks import SOURCE_SETTINGS
from tempering.sources.registry import SOURCES
from tempering.verifiers import score

MODULE = "tests.fixtures.registries_toy.toy_kinds"


@pytest.fixture(scope="module")
def toy():
    module = importlib.import_module(MODULE)
    yield module
    from tempering.agents.env import ENVIRONMENTS

    SOURCES.pop("toy_count:"), SOURCE_SETTINGS.pop("toy_count:"), GOALS.pop("word_count"), ENVIRONMENTS.pop("one_shot")
    sys.modules.pop(MODULE)


def test_a_source_with_its_own_settings_validates_and_loads(toy, tmp_path):
    from tempering.sources.tasks import load_tasks

    path = tmp_path / "grpo.yaml"
    path.write_text('train: {steps: 1}\ntasks: {source: "toy_count:5", step: 2, n: 3}\n')
    cfg = load_config(GRPOConfig, path)
    assert cfg.tasks.options == toy.CountSettings(step=2)
    tasks = load_tasks(cfg.tasks)
    assert [t.prompt for t in tasks] == ["What is 5 + 2?", "What is 6 + 2?", "What is 7 + 2?"]
    assert score(tasks[1], "8").value == 1.0 and score(tasks[1], "9").value == 0.0

    path.write_text('train: {steps: 1}\ntasks: {source: "toy_count:5", stride: 2}\n')
    with pytest.raises(
        ConfigError, match=r"'stride' is not a setting of task source 'toy_count:5' \(its own settings: step\)"
    ):
        load_config(GRPOConfig, path)
    path.write_text('train: {steps: 1}\ntasks: {source: "toy_count:5", step: 0}\n')
    with pytest.raises(
        ConfigError, match=r"step: Input should be greater than or equal to 1 \(task source 'toy_count:5'\)"
    ):
        load_config(GRPOConfig, path)


def _rows(tmp_path, goal):
    path = tmp_path / "tasks.jsonl"
    row = {"id": "t1", "env": "toy", "prompt": "Say cat twice.", "tools": ["submit"], "goal": goal, "split": "heldout"}
    path.write_text(json.dumps(row) + "\n")
    return path


def test_a_goal_kind_with_its_own_keys_validates_and_checks(toy, tmp_path):
    (task,) = load_agent_tasks(_rows(tmp_path, {"type": "word_count", "word": "cat", "times": 2}))
    ctx = ToolContext(session=None)
    assert check_goal(task.goal, ctx, "cat cat") and not check_goal(task.goal, ctx, "cat")
    with pytest.raises(TaskFileError, match=r"tasks.jsonl:1: .*goal 'word_count' needs 'times'"):
        load_agent_tasks(_rows(tmp_path, {"type": "word_count", "word": "cat"}))
    assert not task.needs_sandbox  # needs_session=False, no files, `submit` needs none


def test_an_environment_class_with_its_own_settings_validates_and_runs(toy, tmp_path, smol_tokenizer):
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import agent_rollout
    from tests.agents.scripted_engine import PolicyEngine

    path = tmp_path / "agent.yaml"
    path.write_text("train: {steps: 1}\nepisode: {environment: one_shot, reward: 0.5, max_context_tokens: 256}\n")
    cfg = load_config(AgentConfig, path)
    assert cfg.episode.options == toy.OneShotSettings(reward=0.5)
    path.write_text("train: {steps: 1}\nepisode: {environment: one_shot, invalid_call_penalty: 0.1}\n")
    with pytest.raises(ConfigError, match=r"'invalid_call_penalty' is not a setting of environment 'one_shot'"):
        load_config(AgentConfig, path)

    (task,) = load_agent_tasks(_rows(tmp_path, {"type": "word_count", "word": "cat", "times": 2}))
    for reply, reward in [("cat cat", 0.5), ("cat", 0.0)]:
        engine = PolicyEngine(smol_tokenizer, lambda t, m, r=reply: r, [task])
        batch = agent_rollout([task], engine, AgentRenderer(smol_tokenizer), None, cfg.eval, cfg.episode, n=2)
        assert [ep.trajectory.rewards[-1].value for ep in batch.groups[0]] == [reward, reward]
        assert [ep.stats.success for ep in batch.groups[0]] == [reward > 0] * 2
