"""The algorithm registries: configs take their names from them, and bad names are one-line errors.

An unknown name lists the registered ones; a name registered in another family says which; a
plug-in module that does not import is named; a TIS cap <= 0 is refused; two functions cannot
take one name.
"""

import pytest

from tempering import algorithms
from tempering.config import ConfigError, DPOConfig, GRPOConfig, load_config
from tempering.config.grpo import load_algorithms
from tempering.errors import UserError


def config_error(model, tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(model, path)
    message = str(err.value)
    assert "\n" not in message, message
    return message


def builtin_names(family: algorithms.Family) -> list[str]:
    """The family's names registered by the package (a test module's plug-ins may sit beside them)."""
    algorithms.load()
    return [n for n in algorithms.names(family) if algorithms.lookup(family, n).fn.__module__.startswith("tempering.")]


def test_the_builtins_are_registered_in_their_families():
    assert builtin_names("policy_loss") == ["bnpo", "cispo", "dapo", "dr_grpo", "grpo", "gspo"]
    assert builtin_names("advantage") == [
        "dr_grpo",
        "grpo",
        "per_domain",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "rloo",
    ]
    assert builtin_names("preference_loss") == ["dpo", "ipo", "kto", "orpo", "simpo"]
    assert algorithms.lookup("policy_loss", "gspo").options == {"aggregation": "seq_mean", "stale_safe": True}
    assert algorithms.lookup("preference_loss", "orpo").options == {"reference": False}


def test_config_names_are_validated_against_the_registry(tmp_path):
    cfg = load_config(GRPOConfig, None, ["train.steps=1", "grpo.loss=gspo", "grpo.advantage=rloo"])
    assert (cfg.grpo.loss, cfg.grpo.advantage) == ("gspo", "rloo")
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {loss: ppo2}\n")
    assert "grpo.loss" in message and "unknown policy loss 'ppo2'" in message
    assert f"registered: {', '.join(algorithms.names('policy_loss'))})" in message


def test_a_name_of_another_family_says_so(tmp_path):
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {loss: rloo}\n")
    assert "'rloo' is registered as an advantage estimator, not a policy loss" in message
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {advantage: cispo}\n")
    assert "'cispo' is registered as a policy loss and a Tinker API loss, not an advantage estimator" in message
    message = config_error(DPOConfig, tmp_path, "train: {steps: 1}\ndata: {train: [x.jsonl]}\ndpo: {loss: gspo}\n")
    assert "dpo.loss" in message and "registered as a policy loss, not a preference loss" in message


def test_a_plugin_that_does_not_import_is_named_when_the_run_starts(tmp_path):
    # validation imports no plug-in (it may register `x`); the run's first step imports it and says why it fails
    cfg = load_config(GRPOConfig, None, ["train.steps=1", "grpo.plugins=[no_such_module]", "grpo.loss=x"])
    with pytest.raises(UserError, match=r"plugin module 'no_such_module' does not import \(ModuleNotFoundError"):
        load_algorithms(cfg)


def test_a_name_no_plugin_registers_is_refused_when_the_run_starts(tmp_path):
    (tmp_path / "registers_nothing.py").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(tmp_path))
        cfg = load_config(GRPOConfig, None, ["train.steps=1", "grpo.plugins=[registers_nothing]", "grpo.loss=mine"])
        with pytest.raises(UserError, match="unknown policy loss 'mine'"):
            load_algorithms(cfg)


def test_a_plugin_path_is_refused_at_validation(tmp_path):
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {plugins: [my_rl.py], loss: dapo}\n")
    assert "plugin 'my_rl.py' is not a module name" in message


@pytest.mark.parametrize("cap", [0, -1.5])
def test_an_importance_cap_at_or_below_zero_is_refused(tmp_path, cap):
    message = config_error(GRPOConfig, tmp_path, f"train: {{steps: 1}}\ngrpo: {{off_policy: {{cap: {cap}}}}}\n")
    assert "grpo.off_policy.cap" in message and "greater than 0" in message


def test_floor_above_cap_and_overlong_settings_are_checked(tmp_path):
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {off_policy: {cap: 2, floor: 3}}\n")
    assert "floor 3.0 must be below cap 2.0" in message
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {max_new_tokens: 8, overlong_buffer: 8}\n")
    assert "overlong_buffer 8 must be below max_new_tokens 8" in message
    message = config_error(GRPOConfig, tmp_path, "train: {steps: 1}\ngrpo: {overlong_penalty: 0.5}\n")
    assert "overlong_penalty does nothing without overlong_buffer" in message


def test_two_functions_cannot_take_one_name():
    def other(rewards, groups):
        return rewards

    with pytest.raises(ValueError, match="advantage estimator 'rloo' is already registered"):
        algorithms.register_advantage("rloo")(other)
    with pytest.raises(ValueError, match="aggregation 'sum'"):
        algorithms.register_policy_loss("mine", aggregation="sum")
