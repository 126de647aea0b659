"""`temper rm` and `temper best-of-n`: bad input is one line and exit 2, never a traceback."""

import yaml
from typer.testing import CliRunner

from tempering.cli import app


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_rm_missing_config_and_unknown_key(tmp_path):
    r = run("rm", tmp_path / "nope.yaml")
    assert r.exit_code == 2 and "config file not found" in r.output and "Traceback" not in r.output
    cfg = tmp_path / "rm.yaml"
    cfg.write_text(yaml.safe_dump({"data": {"train": "x.jsonl"}, "train": {"steps": 1}, "rm": {"marign": 1}}))
    r = run("rm", cfg)
    assert r.exit_code == 2 and "rm.marign" in r.output


def test_rm_missing_pair_file_names_it(tmp_path):
    cfg = tmp_path / "rm.yaml"
    cfg.write_text(
        yaml.safe_dump({"data": {"train": "missing.jsonl"}, "train": {"steps": 1}, "out": str(tmp_path / "runs")})
    )
    r = run("rm", cfg)
    assert r.exit_code == 2 and "missing.jsonl" in r.output and "Traceback" not in r.output


def test_best_of_n_refuses_a_model_that_is_not_a_reward_model(tmp_path):
    r = run("best-of-n", "--reward-model", tmp_path, "--limit", "1", "-n", "2")
    assert r.exit_code == 2 and "not a reward model" in r.output


def test_best_of_n_engine_key_without_its_kind_is_one_line(tmp_path):
    r = run("best-of-n", "--reward-model", tmp_path, "--set", "engine.draft.k=2")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "engine.draft applies to engine kind 'speculative' only, not 'hf'" in r.output
