"""Task sources by registration: one `register_source` makes a source loadable by every config
that reads `tasks.source`, and the config loader keeps its name as given (never a path)."""

import pytest
import yaml

from tempering.config import GRPOConfig, load_config
from tempering.sources import registry
from tempering.sources.registry import UnknownSource, register_source, source_names
from tempering.sources.tasks import load_tasks
from tempering.types import Task


@pytest.fixture
def toy(monkeypatch):
    """A `toy:<word>` source registered for this test only: n tasks asking to repeat the word."""
    monkeypatch.setattr(registry, "SOURCES", dict(registry.SOURCES))

    @register_source("toy:")
    def _toy(s, arg):
        return [Task(id=f"toy-{i}", prompt=f"say {arg}", verifier={"type": "exact", "answer": arg}) for i in range(s.n)]

    return _toy


def test_a_registered_toy_source_loads_from_a_grpo_config_file_with_no_other_edit(toy, tmp_path):
    path = tmp_path / "cfg" / "grpo.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({"tasks": {"source": "toy:hi", "n": 3}, "train": {"steps": 1}}))
    cfg = load_config(GRPOConfig, path)
    assert cfg.tasks.source == "toy:hi"  # a source name, not resolved against the config's directory
    tasks = load_tasks(cfg.tasks)
    assert [t.prompt for t in tasks] == ["say hi"] * 3
    assert "toy:<arg>" in source_names()


def test_a_registered_toy_source_loads_in_an_eval_suite(toy, tmp_path, monkeypatch):
    from tempering.evals.suite import load_suite

    monkeypatch.setenv("TEMPERING_SUITES", str(tmp_path / "none"))
    suite_file = tmp_path / "toy.yaml"
    suite_file.write_text(
        yaml.safe_dump({"name": "toy", "tasks": [{"source": "toy:yo", "n": 2}], "metrics": ["accuracy"]})
    )
    suite = load_suite(str(suite_file))
    assert [t.prompt for t in suite.task_list] == ["say yo", "say yo"]


def test_an_unknown_source_names_the_registered_ones(toy):
    from tempering.config import TaskSourceSettings

    with pytest.raises(UnknownSource) as info:
        load_tasks(TaskSourceSettings(source="nope:1"))
    message = str(info.value)
    assert "'nope:1'" in message and "toy:<arg>" in message and "humaneval" in message


def test_a_name_is_registered_once_and_has_the_shape_the_config_loader_keeps(toy):
    with pytest.raises(ValueError, match="registered twice"):
        register_source("toy:")(lambda s, arg: [])
    with pytest.raises(ValueError, match="expected a word"):
        register_source("my/tasks.jsonl")(lambda s, arg: [])
