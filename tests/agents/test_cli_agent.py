"""`temper agent` and `temper eval run agent:...`: bad input is one clear line, never a traceback."""

import json

import pytest
from typer.testing import CliRunner

from tempering.agents.config import AgentConfig
from tempering.cli import app
from tempering.config import load_config
from tests.test_cli_errors import one_line_error


def test_example_config_validates():
    cfg = load_config(AgentConfig, "examples/agent/agent_arith.yaml")
    assert cfg.tasks.suites == ["tool_arith"] and cfg.sft.steps > 0 and cfg.rl.group_size >= 2


def test_agent_config_errors_are_one_line(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text("train: {steps: 1}\nrl: {group_size: 1}\n")
    line = one_line_error(CliRunner().invoke(app, ["agent", str(cfg)]))
    assert "rl.group_size" in line
    cfg.write_text(f"train: {{steps: 1}}\ntasks: {{suites: [{tmp_path}/missing.jsonl]}}\nout: {tmp_path}\n")
    line = one_line_error(CliRunner().invoke(app, ["agent", str(cfg)]))
    assert "missing.jsonl: no such task file" in line


def test_a_bad_task_row_names_file_and_line(tmp_path):
    rows = tmp_path / "t.jsonl"
    good = {"id": "a", "env": "x", "prompt": "p", "tools": ["submit"], "goal": {"type": "answer", "value": "1"}}
    rows.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "tools": ["teleport"]}) + "\n")
    cfg = tmp_path / "a.yaml"
    cfg.write_text(f"train: {{steps: 1}}\ntasks: {{suites: [{rows}]}}\nout: {tmp_path}\n")
    line = one_line_error(CliRunner().invoke(app, ["agent", str(cfg)]))
    assert "t.jsonl:2:" in line and "teleport" in line


def test_eval_run_unknown_agent_suite_is_one_line(tmp_path):
    line = one_line_error(CliRunner().invoke(app, ["eval", "run", "agent:nope", "--out", str(tmp_path)]))
    assert "nope" in line


@pytest.mark.slow
def test_eval_run_agent_suite_writes_results_json_samples_and_report(tmp_path):
    from tempering.evals.results import EvalResults

    res = CliRunner().invoke(app, ["eval", "run", "agent:tool_arith", "--limit", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (suite,) = EvalResults.load(tmp_path / "results.json").suites
    assert suite.suite == "agent:tool_arith" and suite.track == "agent" and len(suite.task_scores) == 2
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["suite"] for r in rows} == {"agent:tool_arith"}
    assert (tmp_path / "report.html").is_file() and (tmp_path / "agent_results.json").is_file()
