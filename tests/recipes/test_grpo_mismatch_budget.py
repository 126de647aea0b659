"""`grpo.mismatch_budget`: the run stops, with a one-line reason naming the step and the figure,
when the trainer's and the rollout engine's log-probs of the sampled tokens drift apart; a
budget that names no logged figure is a one-line config error."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import ConfigError, GRPOConfig, load_config
from tempering.recipes.grpo import MismatchExceeded, mismatch_budget


def test_the_budget_stops_only_above_it():
    check = mismatch_budget({"logprob_mismatch": 0.05, "mismatch_kl": 0.001})
    check(1, {"logprob_mismatch": 0.05, "mismatch_kl": 0.0})  # at the budget: fine
    check(2, {"loss": 1.0})  # a step without the figures: nothing to judge
    with pytest.raises(
        MismatchExceeded,
        match=r"step 3: mismatch_kl \(KL\(rollout \|\| train\) on sampled tokens\) = 0.002 exceeds "
        r"grpo.mismatch_budget.mismatch_kl 0.001",
    ):
        check(3, {"logprob_mismatch": 0.01, "mismatch_kl": 0.002})
    mismatch_budget(None)(4, {"logprob_mismatch": 9.0})  # no budget: only logged


@pytest.mark.parametrize(
    "budget, message",
    [
        ("0.05", "mismatch_budget 0.05 names no metric to read"),
        ("{}", "mismatch_budget {} names no metric to read"),
        ("{ratio_mean: 0.1}", "mismatch_budget names 'ratio_mean', which no step logs"),
        ("{logprob_mismatch: 0}", "mismatch_budget.logprob_mismatch must be a number > 0"),
    ],
)
def test_a_budget_without_a_metric_to_read_is_a_one_line_config_error(tmp_path, budget, message):
    path = tmp_path / "g.yaml"
    path.write_text(f"train: {{steps: 1}}\ngrpo: {{mismatch_budget: {budget}}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, path)
    line = str(err.value)
    assert message in line and "\n" not in line.strip() and "grpo.mismatch_budget" in line


def _config(tmp_path, model_dir, budget) -> str:
    cfg = {
        "model": str(model_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 8},
        "heldout": None,
        "reward": [
            {"name": "digit", "weight": 1.0, "verifier": {"type": "regex", "pattern": "\\d", "on": "completion"}}
        ],
        "grpo": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 4,
            "max_refills": 0,
            "mismatch_budget": budget,
        },
        "train": {"steps": 1, "precision": "fp32", "optim": {"lr": 1e-3}},
        "out": str(tmp_path / "runs"),
        "name": "g",
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_sampling_in_bf16_while_training_in_fp32_trips_the_budget(tmp_path, tiny_dir, monkeypatch):
    """The planted mismatch: the engine samples in bf16, the trainer recomputes in fp32. The same
    run with both in fp32 passes the same budget."""
    import tempering.rollout.select as select

    budget = {"logprob_mismatch": 1e-4}
    res = CliRunner().invoke(app, ["grpo", _config(tmp_path / "agree", tiny_dir, budget)])
    assert res.exit_code == 0, res.output
    metrics = (tmp_path / "agree" / "runs" / "g" / "metrics.jsonl").read_text().splitlines()
    steps = [r for r in map(json.loads, metrics) if "logprob_mismatch" in r]
    assert len(steps) == 1 and all(r["logprob_mismatch_p99"] < 1e-4 for r in steps)
    assert all("mismatch_kl" in r and "roundtrip_mismatch_rate" in r for r in steps)

    real = select.build_engine
    monkeypatch.setattr(select, "build_engine", lambda s, m, t, precision, **kw: real(s, m, t, "bf16", **kw))
    res = CliRunner().invoke(app, ["grpo", _config(tmp_path / "planted", tiny_dir, budget)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = res.stderr.strip().splitlines()[-1]  # after the step's progress line
    assert "step 1: logprob_mismatch (mean |log p_train - log p_rollout|) = " in line
    assert "exceeds grpo.mismatch_budget.logprob_mismatch 0.0001" in line
