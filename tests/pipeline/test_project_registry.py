"""One registry per project: `temper init` marks a project root; every run started in it or below
(a pipeline's own run root included) records there, and every command that reads the registry
finds it from the working directory and says which one it read."""

import pytest
import torch
from typer.testing import CliRunner

from tempering.cli import app
from tempering.runs import REGISTRY_ENV, project_registry
from tempering.runs.registry import Registry, describe_input
from tempering.runs.stage import StageSpec, run_stage
from tempering.train.checkpoint import save_checkpoint


@pytest.fixture()
def elsewhere(tmp_path, monkeypatch):
    monkeypatch.delenv(REGISTRY_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def finished_stage(out, name="sft-a"):
    out.mkdir(parents=True, exist_ok=True)
    data = out.parent / "train.jsonl"
    data.write_text('{"x": 1}\n')
    spec = StageSpec("sft", str(out), name, {"train": {"steps": 1}}, [describe_input(data, "train")], None, 1)
    with run_stage(spec) as stage:
        save_checkpoint(stage.run_dir / "checkpoints", 1, {"w": torch.zeros(2)}, {}, {}, 2)
        stage.finish({"steps": 1}, {})
    return stage.result


def test_a_pipeline_run_root_records_in_the_project_registry(elsewhere):
    res = CliRunner().invoke(app, ["init"])
    assert res.exit_code == 0 and (elsewhere / ".tempering" / "registry.sqlite").is_file(), res.output
    (elsewhere / "work" / "deep").mkdir(parents=True)
    finished_stage(elsewhere / "runs" / "pipeline")  # `out: runs/pipeline`, as a pipeline file sets
    assert not (elsewhere / "runs" / "pipeline" / "registry.sqlite").exists()
    with Registry(elsewhere / ".tempering" / "registry.sqlite") as reg:
        assert [r["name"] for r in reg.list(10)] == ["sft-a"]
    import os

    os.chdir(elsewhere / "work" / "deep")  # found upward, from any folder of the project
    assert project_registry() == elsewhere / ".tempering" / "registry.sqlite"
    res = CliRunner().invoke(app, ["runs", "ls"])
    assert res.exit_code == 0 and "sft-a" in res.stdout, res.output
    assert res.stderr.strip() == f"registry: {elsewhere / '.tempering' / 'registry.sqlite'} (project {elsewhere})"
    assert CliRunner().invoke(app, ["init", "."]).exit_code == 2  # no project inside a project


def test_outside_a_project_an_absent_registry_names_those_under_the_root(elsewhere):
    finished_stage(elsewhere / "runs" / "pipeline")
    res = CliRunner().invoke(app, ["release", "ls"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == (
        "error: no registry at runs/registry.sqlite (run root); registries under runs: runs/pipeline/registry.sqlite "
        "(pass --registry FILE); `temper init` makes one registry for every run of this project"
    )
