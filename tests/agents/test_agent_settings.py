"""Agent RL settings hold exactly the GRPO fields the agent path honours; the single-turn rollout's are errors at load."""

import pytest
from typer.testing import CliRunner

from tempering.agents.config import SINGLE_TURN_ONLY, AgentConfig, AgentRLSettings
from tempering.cli import app
from tempering.config import ConfigError, GRPOPolicySettings, GRPOSettings, load_config
from tests.test_cli_errors import one_line_error


@pytest.mark.parametrize(
    "key, value", [("max_off_policy_steps", "1"), ("generation_chunks", "3"), ("truncation", "mask")]
)
def test_a_single_turn_grpo_key_in_an_agent_config_fails_at_load_naming_it(tmp_path, key, value):
    cfg = tmp_path / "a.yaml"
    cfg.write_text(f"train: {{steps: 1}}\nrl: {{{key}: {value}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(AgentConfig, cfg)
    message = str(err.value)
    assert "\n" not in message and "rl" in message and key in message and "agent RL does not implement" in message
    line = one_line_error(CliRunner().invoke(app, ["agent", str(cfg), "--out", str(tmp_path)]))
    assert key in line


def test_the_grpo_fields_agents_honour_still_load(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text(
        "train: {steps: 1}\nrl: {mismatch_budget: {logprob_mismatch: 0.5}, updates_per_batch: 2, clip_high: 0.3, dynamic_sampling: false}\n"
    )
    rl = load_config(AgentConfig, cfg).rl
    assert (rl.mismatch_budget, rl.updates_per_batch, rl.clip_high, rl.dynamic_sampling) == (
        {"logprob_mismatch": 0.5},
        2,
        0.3,
        False,
    )


def test_agent_settings_are_the_shared_grpo_fields_and_nothing_single_turn():
    shared = set(GRPOPolicySettings.model_fields)
    assert shared <= set(AgentRLSettings.model_fields)
    assert not SINGLE_TURN_ONLY & set(AgentRLSettings.model_fields)
    assert {"max_off_policy_steps", "stale", "truncation", "generation_chunks"} <= SINGLE_TURN_ONLY
    assert SINGLE_TURN_ONLY | shared | {"max_refills"} == set(GRPOSettings.model_fields)
    assert "max_refills" in AgentRLSettings.model_fields  # agent RL refills dropped tied groups too


@pytest.mark.parametrize(
    "rl, words",
    [
        ("{step: {weight: 0.1}}", "credit: step"),  # shaping weights that would do nothing
        ("{gamma: 0.9}", "credit: step"),
        ("{credit: step, step: {weight: 1.0}}", "weight"),  # the outcome must stay dominant
        ("{credit: turns}", "credit"),
    ],
)
def test_step_credit_keys_without_step_credit_fail_at_load(tmp_path, rl, words):
    cfg = tmp_path / "a.yaml"
    cfg.write_text(f"train: {{steps: 1}}\nrl: {rl}\n")
    with pytest.raises(ConfigError) as err:
        load_config(AgentConfig, cfg)
    assert "\n" not in str(err.value) and words in str(err.value)


def test_step_credit_and_refills_load(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text(
        "train: {steps: 1}\nrl: {credit: step, step: {valid: 0.2}, gamma: 0.9, max_refills: 3, tiers: [1, 2]}\n"
    )
    rl = load_config(AgentConfig, cfg).rl
    assert (rl.credit, rl.step.valid, rl.step.weight, rl.gamma, rl.max_refills, rl.tiers) == (
        "step",
        0.2,
        0.25,
        0.9,
        3,
        [1, 2],
    )
