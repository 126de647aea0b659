"""Bad input to `temper` gives one clear line and a non-zero exit, never a traceback."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.models.load import ModelNotFound, resolve_model


def one_line_error(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    return lines[0]


def test_unknown_model_says_unknown_lists_aliases_and_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="offline"):
        resolve_model("no-such-model")
    line = one_line_error(CliRunner().invoke(app, ["model", "resolve", "no-such-model"]))
    assert "unknown model 'no-such-model'" in line and "smollm2-135m-instruct" in line and "HF_HUB_OFFLINE" in line
    line = one_line_error(CliRunner().invoke(app, ["model", "resolve", "org/not-here"]))
    assert "'org/not-here'" in line


def test_unknown_model_in_a_training_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) + "\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: no-such-model\ndata: {{train: {data}}}\ntrain: {{steps: 1}}\nout: {tmp_path}\n")
    line = one_line_error(CliRunner().invoke(app, ["sft", str(cfg)]))
    assert "unknown model" in line


def test_verify_missing_files_and_incomplete_spec(tmp_path):
    task, completion = tmp_path / "task.json", tmp_path / "c.txt"
    completion.write_text("The answer is 4")
    line = one_line_error(CliRunner().invoke(app, ["verify", "--task", str(task), "--completion", str(completion)]))
    assert str(task) in line and "not found" in line
    task.write_text(json.dumps({"id": "t", "prompt": "2+2?", "verifier": {"type": "numeric", "answer": "4"}}))
    line = one_line_error(
        CliRunner().invoke(app, ["verify", "--task", str(task), "--completion", str(tmp_path / "none.txt")])
    )
    assert "none.txt" in line and "completion" in line
    task.write_text(json.dumps({"id": "t", "prompt": "2+2?", "verifier": {"type": "numeric"}}))
    line = one_line_error(CliRunner().invoke(app, ["verify", "--task", str(task), "--completion", str(completion)]))
    assert "'answer'" in line and "numeric" in line


def test_sandbox_run_exit_status_follows_the_program(tmp_path):
    run = ["sandbox", "run"]
    res = CliRunner().invoke(app, run + ["--file", str(tmp_path / "missing.py")])
    assert res.exit_code == 2 and "missing.py" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(app, run + ["--", "python3", "-c", "raise SystemExit(3)"])
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "nonzero_exit"
    res = CliRunner().invoke(app, run + ["--limits", "wall_s=1", "--", "sleep", "5"])
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "timeout"
    prog = tmp_path / "ok.py"
    prog.write_text("print(6 * 7)")
    res = CliRunner().invoke(app, run + ["--file", str(prog)])
    assert res.exit_code == 0 and json.loads(res.stdout)["stdout"] == "42\n"


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.startswith("tempering ")


def test_data_help_names_only_commands_that_exist():
    # The help promised "dedup, decontam, mix" while only validate and decontam existed.
    import re

    from tempering.cli import data_app

    res = CliRunner().invoke(app, ["data", "--help"])
    assert res.exit_code == 0
    registered = {c.name or c.callback.__name__ for c in data_app.registered_commands}
    promised = re.findall(r"\(([^)]*)\)", data_app.info.help)[-1]
    for name in (w.strip() for w in promised.split(",")):
        assert name in registered, name
        assert name in res.stdout
