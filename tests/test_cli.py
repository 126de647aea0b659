"""The `temper` app wires its sub-commands: sandbox, model resolve, runs."""

import json

from typer.testing import CliRunner

from tempering.cli import app
from tempering.models.load import resolve_model
from tempering.runs.registry import Registry


def test_sandbox_is_mounted_on_temper():
    res = CliRunner().invoke(app, ["sandbox", "run", "--", "python3", "-c", "print(6 * 7)"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["stdout"] == "42\n"


def test_model_resolve_and_runs_listing(tmp_path):
    res = CliRunner().invoke(app, ["model", "resolve", "smollm2-135m-instruct"])
    assert res.exit_code == 0 and res.stdout.strip() == resolve_model("smollm2-135m-instruct")
    assert CliRunner().invoke(app, ["model", "resolve", str(tmp_path / "x.gguf")]).exit_code == 2
    reg = Registry(tmp_path / "registry.sqlite")
    reg.finish(reg.start("first-run", "sft", {}, [], "base"), {}, {})
    res = CliRunner().invoke(app, ["runs", "ls", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "first-run" in res.stdout and "finished" in res.stdout
    assert CliRunner().invoke(app, ["runs", "ls", "--root", str(tmp_path / "none")]).exit_code == 2
