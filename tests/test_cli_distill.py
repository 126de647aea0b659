"""`temper distill`: bad input is one clear line (config and model errors), never a traceback."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tests.test_cli_errors import one_line_error


def _config(tmp_path, student: str) -> str:
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2 + 2 = 4"}]}
        )
        + "\n"
    )
    cfg = tmp_path / "distill.yaml"
    cfg.write_text(f"student: {student}\ndata: {{train: {data}}}\ntrain: {{steps: 1}}\nout: {tmp_path}/runs\n")
    return str(cfg)


def test_distill_rejects_an_empty_layer_list(tmp_path):
    line = one_line_error(CliRunner().invoke(app, ["distill", _config(tmp_path, "{layers: []}")]))
    assert "student.layers" in line and "distinct non-negative" in line


@pytest.mark.slow  # loads the default model
def test_distill_names_a_layer_the_teacher_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = one_line_error(CliRunner().invoke(app, ["distill", _config(tmp_path, "{layers: [0, 30]}")]))
    assert "[0, 30]" in line and "layers 0..29" in line
