"""A task row choosing code: the `verifiers` spec names an environment, i.e. a module to import and call.

Only environments the run's config names (a `verifiers:<env_id>` task source) or that code
registered (`register_environment`) may load. A row naming any other module (`this`,
`venv.__main__`, anything installed) is refused before the import, as one line naming where
the row is; nothing of the module runs.
"""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.errors import UserError
from tempering.sources.tasks import read_task_file

PLANTED = "planted_env_for_rows"
"""A module on sys.path that leaves a marker file when it is imported or its `load_environment` is called."""


@pytest.fixture
def planted(tmp_path, monkeypatch):
    marker = tmp_path / "imported.txt"
    (tmp_path / f"{PLANTED}.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\n\n\n"
        f"def load_environment(**kwargs):\n    open({str(marker)!r}, 'a').write('called\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def row(env: str) -> dict:
    return {
        "id": "t",
        "prompt": "2+2?",
        "verifier": {"type": "verifiers", "env": env, "env_args": {}, "row": {"prompt": [], "answer": "4"}},
    }


@pytest.mark.parametrize("env", [PLANTED, "this", "venv.__main__"])
def test_temper_verify_refuses_a_row_that_names_a_module_to_import(tmp_path, planted, env, capfd, monkeypatch):
    monkeypatch.setattr("sys.argv", ["venv"])  # were venv's CLI to run, it would parse these (and stop)
    (tmp_path / "task.json").write_text(json.dumps(row(env)))
    (tmp_path / "c.txt").write_text("4")
    res = CliRunner().invoke(
        app, ["verify", "--task", str(tmp_path / "task.json"), "--completion", str(tmp_path / "c.txt")]
    )
    out = res.output + "".join(capfd.readouterr())
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, out[-1000:]
    assert lines[0].startswith(f"error: {tmp_path / 'task.json'}: ") and repr(env) in lines[0]
    assert "config" in lines[0]
    assert not planted.exists()  # the planted module never ran
    assert "Beautiful is better than ugly" not in out and "usage: venv" not in out  # nor did `this` or venv's CLI


def test_a_task_file_row_naming_a_module_is_refused_at_its_line(tmp_path, planted):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "ok", "prompt": "1+1?", "verifier": {"type": "numeric", "answer": "2"}}) + "\n")
    with path.open("a") as f:
        f.write(json.dumps(row(PLANTED)) + "\n")
    with pytest.raises(UserError) as info:
        read_task_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: ") and "\n" not in message and repr(PLANTED) in message
    assert not planted.exists()


def test_an_environment_registered_by_code_loads_from_a_row(planted, monkeypatch):
    from tempering.verifiers import environments
    from tempering.verifiers.base import spec_problem

    monkeypatch.setattr(environments, "NAMED", set())  # this test's registrations end with it
    assert spec_problem(row(PLANTED)["verifier"]) is not None
    environments.register_environment(PLANTED)
    assert spec_problem(row(PLANTED)["verifier"]) is None
    with pytest.raises(environments.UnusableEnvironment, match="not a verifiers Environment"):  # it loaded and ran
        environments.load_environment(PLANTED)
    assert planted.read_text() == "imported\ncalled\n"
