"""User errors vs bugs: bad input is one `error:` line and exit 2; anything else is an `internal
error` line naming a crash log that holds the whole traceback, exit 70 (`--debug` or
TEMPERING_DEBUG=1 also print it). The bug here is planted: a ValueError from inside the torch
call that computes the SFT loss's log-probs, the kind of error that used to read as bad input."""

import json
import tempfile

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tempering.pipeline.runner import RECORD
from tests.conftest import tiny_llama

INTERNAL = "internal error (a bug in Tempering or a library it calls, not your input)"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The temp dir a crash log falls back to, empty and this test's own."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    monkeypatch.delenv("TEMPERING_DEBUG", raising=False)
    return where


@pytest.fixture
def planted(monkeypatch):
    """A bug inside the training step: torch's log_softmax (the SFT loss's log-probs) raises ValueError."""

    def boom(*args, **kwargs):
        raise ValueError("planted")

    monkeypatch.setattr(torch, "log_softmax", boom)


def sft_keys(tmp_path, model: str) -> dict:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(8, 1)))
    train = {"steps": 2, "batch_size": 2, "precision": "fp32", "threads": 1, "optim": {"lr": 1e-3}}
    return {
        "model": model,
        "lora": {"r": 4, "alpha": 8},
        "data": {"train": str(data), "max_length": 96},
        "train": train,
    }


def sft_config(tmp_path, model: str, **extra) -> str:
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({**sft_keys(tmp_path, model), "out": str(tmp_path / "runs"), **extra}))
    return str(path)


def internal_line(res) -> str:
    assert res.exit_code == 70, res.output + repr(res.exception)
    lines = [line for line in res.stderr.splitlines() if line.startswith(INTERNAL)]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_a_bug_in_a_training_step_is_an_internal_error_with_its_traceback_in_the_run(
    tmp_path, tiny_dir, planted, temp_dir
):
    res = CliRunner().invoke(app, ["sft", sft_config(tmp_path, tiny_dir), "--name", "crashed"])
    line = internal_line(res)
    log = tmp_path / "runs" / "crashed" / "crash.log"
    assert "ValueError: planted" in line and line.endswith(f"traceback in {log}")
    assert "Traceback" not in res.stderr  # without --debug the traceback is in the log only
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "ValueError: planted" in text
    assert "in _head_chunk" in text and "in boom" in text  # the frames down to where it was raised
    assert not list(temp_dir.iterdir())  # the run's own dir had it; nothing fell back to the temp dir


@pytest.mark.parametrize("how", ["flag", "flag after the command", "env"])
def test_debug_also_prints_the_traceback(tmp_path, tiny_dir, planted, temp_dir, monkeypatch, how):
    args = ["sft", sft_config(tmp_path, tiny_dir), "--name", "crashed"]
    if how == "flag":
        args = ["--debug", *args]
    elif how == "flag after the command":  # a global flag counts wherever it stands, as --verbose does
        args = [*args, "--debug"]
    else:
        monkeypatch.setenv("TEMPERING_DEBUG", "1")
    res = CliRunner().invoke(app, args)
    internal_line(res)
    assert "Traceback (most recent call last)" in res.stderr and "in _head_chunk" in res.stderr
    assert "ValueError: planted" in res.stderr
    assert (tmp_path / "runs" / "crashed" / "crash.log").is_file()


def test_a_config_error_is_still_one_line_and_exit_2_with_no_crash_log(tmp_path, tiny_dir, temp_dir):
    res = CliRunner().invoke(app, ["sft", sft_config(tmp_path, tiny_dir, no_such_key=1), "--name", "bad"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and res.stderr.startswith("error:")
    assert "no_such_key" in res.stderr and "Traceback" not in res.output and INTERNAL not in res.stderr
    assert not (tmp_path / "runs" / "bad").exists() and not list(temp_dir.iterdir())


def test_bad_rows_found_inside_the_run_are_one_line_too(tmp_path, tiny_dir, temp_dir):
    """Bad input discovered late (the data file has no usable row) is still bad input, not a bug."""
    cfg = yaml.safe_load(open(sft_config(tmp_path, tiny_dir)))
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["sft", str(tmp_path / "sft.yaml"), "--name", "norows"])
    assert res.exit_code == 2 and res.stderr.startswith("error:") and INTERNAL not in res.stderr, res.output
    assert not (tmp_path / "runs" / "norows" / "crash.log").exists() and not list(temp_dir.iterdir())


def test_a_bug_in_a_command_without_a_run_dir_logs_to_the_temp_dir(tmp_path, monkeypatch, temp_dir):
    import tempering.data.io as io

    def boom(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(io, "load_rows", boom)
    (tmp_path / "d.jsonl").write_text("{}\n")
    res = CliRunner().invoke(app, ["data", "validate", str(tmp_path / "d.jsonl"), "--no-render"])
    line = internal_line(res)
    [log] = temp_dir.iterdir()
    assert log.name.startswith("tempering-crash-") and line.endswith(f"traceback in {log}")
    assert "KeyError: 'planted'" in log.read_text()


def test_a_stage_that_hits_a_bug_records_its_crash_log(tmp_path, tiny_dir, planted, temp_dir):
    stages = {"sft": {"kind": "sft", **sft_keys(tmp_path, tiny_dir)}}
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": stages}))
    res = CliRunner().invoke(app, ["run", str(pipeline)])
    assert res.exit_code == 3, res.output + repr(res.exception)
    stage = json.loads(res.stdout.strip().splitlines()[-1])["stages"]["sft"]
    record = json.loads((tmp_path / "runs" / stage["run_dir"] / RECORD).read_text())
    log = tmp_path / "runs" / stage["run_dir"] / "crash.log"
    assert record["status"] == "failed" and record["error"] == "ValueError: planted"
    assert record["crash_log"] == stage["crash_log"] == str(log)
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in _head_chunk" in text and "ValueError: planted" in text
    assert f"stage sft failed: {INTERNAL}: ValueError: planted — traceback in {log}" in res.stderr


def test_a_stage_with_bad_input_records_one_line_and_no_crash_log(tmp_path, tiny_dir, temp_dir):
    keys = sft_keys(tmp_path, tiny_dir)
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": {"sft": {"kind": "sft", **keys}}}))
    res = CliRunner().invoke(app, ["run", str(pipeline)])
    assert res.exit_code == 3, res.output + repr(res.exception)
    stage = json.loads(res.stdout.strip().splitlines()[-1])["stages"]["sft"]
    record = json.loads((tmp_path / "runs" / stage["run_dir"] / RECORD).read_text())
    assert record["status"] == "failed" and "crash_log" not in record and "crash_log" not in stage
    assert not (tmp_path / "runs" / stage["run_dir"] / "crash.log").exists()
    assert INTERNAL not in res.stderr and "stage sft failed: " in res.stderr
