"""Config errors name their real source; data paths in a config follow the config file."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import ConfigError, GRPOConfig, SFTConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def write_cfg(path, **extra):
    cfg = {
        "data": {
            "train": "d/train.jsonl",
            "eval": ["d/eval.jsonl", "/abs/e.jsonl"],
            "replay": {"data": "../general.jsonl"},
        },
        "train": {"steps": 1},
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_relative_data_paths_resolve_against_the_config_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_cfg(tmp_path / "configs" / "sft.yaml")
    cfg = load_config(SFTConfig, "configs/sft.yaml")
    assert cfg.data.train == ["configs/d/train.jsonl"]
    assert cfg.data.eval == ["configs/d/eval.jsonl", "/abs/e.jsonl"]
    assert cfg.data.replay.data == ["general.jsonl"]
    # --set values are command-line paths: relative to the working directory, as given
    cfg = load_config(SFTConfig, "configs/sft.yaml", ["data.train=mine.jsonl"])
    assert cfg.data.train == ["mine.jsonl"]


def test_task_file_sources_resolve_but_builtin_names_do_not(tmp_path):
    path = tmp_path / "c" / "grpo.yaml"
    path.parent.mkdir()
    path.write_text(
        yaml.safe_dump(
            {
                "tasks": {"source": "tasks.jsonl"},
                "train": {"steps": 1},
                "heldout": {"tasks": {"source": "builtin:arithmetic"}},
            }
        )
    )
    cfg = load_config(GRPOConfig, path)
    assert cfg.tasks.source == str(tmp_path / "c" / "tasks.jsonl")
    assert cfg.heldout.tasks.source == "builtin:arithmetic"


def test_the_shipped_demo_config_finds_its_data_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(SFTConfig, ROOT / "examples" / "sft_demo.yaml")
    assert all(Path(p).is_file() for p in cfg.data.train + cfg.data.eval)


@pytest.mark.parametrize(
    "item, expected",
    [
        ("train.steps=[1", "--set 'train.steps=[1': the value '[1' is not valid YAML"),
        ("train.steps", "--set 'train.steps': expected key.sub=value"),
        ("train.steps.x=1", "--set 'train.steps.x=1': 'train.steps' is not a section (it holds 1)"),
        ("train..steps=1", "--set 'train..steps=1': 'train..steps' is not a key"),
        ("train.steps=abc", "--set 'train.steps=abc': train.steps: Input should be a valid integer"),
        ("data.packing=[1]", "--set 'data.packing=[1]': data.packing: Input should be a valid boolean"),
    ],
)
def test_set_errors_name_the_set_argument_not_the_file(tmp_path, item, expected):
    path = write_cfg(tmp_path / "sft.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(SFTConfig, path, [item])
    assert str(info.value).startswith(expected), str(info.value)
    assert "sft.yaml" not in str(info.value)


def test_file_errors_still_name_the_file(tmp_path):
    path = write_cfg(tmp_path / "sft.yaml", name=None)
    path.write_text(path.read_text() + "oops: [1\n")
    with pytest.raises(ConfigError, match=r"sft.yaml:\d+: invalid YAML"):
        load_config(SFTConfig, path)
    path = write_cfg(tmp_path / "sft.yaml", optimiser=1)
    with pytest.raises(
        ConfigError,
        match=r"^.*sft.yaml: optimiser: Extra inputs are not permitted \(allowed: out, name, rope_scaling, chat_template, model, .*lora, data, train\)$",
    ):
        load_config(SFTConfig, path, ["train.steps=3"])
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(SFTConfig, tmp_path / "nope.yaml")


def test_set_creates_a_section_that_the_file_left_null(tmp_path):
    path = write_cfg(tmp_path / "sft.yaml", lora=None)
    assert load_config(SFTConfig, path, ["lora.r=4"]).lora.r == 4


def test_cli_prints_the_set_error_as_one_line(tmp_path):
    path = write_cfg(tmp_path / "sft.yaml")
    res = CliRunner().invoke(app, ["sft", str(path), "--set", "train.steps=[1"])
    assert res.exit_code == 2
    text = " ".join(res.stderr.split())
    assert "--set 'train.steps=[1': the value '[1' is not valid YAML" in text and "Traceback" not in res.output


def test_a_path_field_resolves_only_under_the_class_that_declares_it(tmp_path):
    """`train` is a path in the section whose class lists it in `path_fields`; the same key in
    another section is a plain string (a global key list would rewrite both)."""
    from tempering.config import Strict

    class Files(Strict):
        path_fields = ("train",)
        train: str

    class Words(Strict):
        train: str

    class Top(Strict):
        data: Files
        notes: Words
        more: list[Files] = []

    path = tmp_path / "c" / "top.yaml"
    path.parent.mkdir()
    body = {"data": {"train": "t.jsonl"}, "notes": {"train": "t.jsonl"}, "more": [{"train": "m.jsonl"}]}
    path.write_text(yaml.safe_dump(body))
    cfg = load_config(Top, path)
    assert cfg.data.train == str(tmp_path / "c" / "t.jsonl")
    assert cfg.more[0].train == str(tmp_path / "c" / "m.jsonl")
    assert cfg.notes.train == "t.jsonl"


def test_the_shipped_config_classes_declare_the_data_paths_of_every_command():
    from tempering.config import (
        DataSettings,
        PreferenceDataSettings,
        ReplaySettings,
        RMDataSettings,
        TaskSourceSettings,
    )

    declared = {c.__name__: c.path_fields for c in (DataSettings, PreferenceDataSettings, RMDataSettings)}
    assert declared == {c: ("train", "eval") for c in declared}
    assert ReplaySettings.path_fields == ("data",) and TaskSourceSettings.path_fields == ("source",)
    assert GRPOConfig.path_fields == ("chat_template",) and SFTConfig.path_fields == ("chat_template",)


def test_an_unknown_key_gets_the_closest_allowed_key_of_its_section(tmp_path):
    path = write_cfg(tmp_path / "sft.yaml")
    with pytest.raises(ConfigError, match=r"--set 'train.stpes=3': train.stpes: .*; did you mean 'steps'\?$"):
        load_config(SFTConfig, path, ["train.stpes=3", "train.steps=3"])
    with pytest.raises(ConfigError, match=r"lora.alhpa: .*; did you mean 'alpha'\?$"):
        load_config(SFTConfig, path, ["lora.alhpa=4"])


def test_dry_run_and_the_run_refuse_the_same_run_names(tmp_path):
    from tempering.runs.stage import InvalidRunName, validate_run_name

    path = write_cfg(tmp_path / "sft.yaml")
    for name in ("../escape", ".hidden", "a b", "x" * 129):
        with pytest.raises(InvalidRunName) as refused:
            validate_run_name(name)
        with pytest.raises(ConfigError) as at_load:  # what `--dry-run` loads, before any run dir exists
            load_config(SFTConfig, path, literal={"name": name})
        assert str(at_load.value).endswith(f"name: {refused.value}")
    assert load_config(SFTConfig, path, literal={"name": "sft-a.v2_1"}).name == "sft-a.v2_1"
