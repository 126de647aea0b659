"""`temper demo`: a pipeline run by `temper run`'s runner, then the before/after table, the gate,
the release, and the comparison report with its headless-Chromium screenshot. Tiny in-process
"recall" model (tests/evals/conftest.py); the shipped examples/demo.yaml is checked for validity."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.pipeline.runner import load_plan
from tempering.recipes.demo import demo_pipeline
from tests.evals.conftest import env, recall_dir, recall_model  # noqa: F401 (fixtures)
from tests.recipes.test_loop import eval_stage, gate_stage, recall_setup, sft_stage, write_pipeline  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_demo_is_the_loop_and_validates_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no examples/ here: the source tree's file is used
    path = demo_pipeline()
    assert path.resolve() == (ROOT / "examples" / "demo.yaml").resolve()
    kinds = [s.kind for s in load_plan(path).stages]
    assert kinds == ["eval", "data.synth", "sft", "grpo", "eval", "gate", "release"]
    res = CliRunner().invoke(app, ["demo", "--pipeline", "nope.yaml"])
    assert res.exit_code == 2 and " ".join(res.output.split()) == "error: nope.yaml: demo pipeline not found"


def test_demo_prints_before_after_gate_release_and_writes_the_report(tmp_path, recall_setup):
    stages = {
        "baseline": eval_stage(recall_setup),
        "sft": sft_stage(recall_setup, recall_setup["data"], lr=1e-5, steps=2),
        "after": eval_stage(recall_setup, "${sft.final}"),
        "gate": gate_stage(),
        "release": {"kind": "release", "model": "${sft.final}", "gate": "${gate.verdict}"},
    }
    path = write_pipeline(tmp_path, stages)
    res = CliRunner().invoke(app, ["demo", "--pipeline", str(path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "before (baseline) / after (after)" in text
    assert "gate PASS recall.accuracy >= base - 0.15" in text and "release:" in text
    before = json.loads(Path(tmp_path / "runs").glob("baseline-*/results.json").__next__().read_text())
    mean = next(s for s in before["suites"] if s["suite"] == "recall")["metrics"]["accuracy"]["mean"]
    assert f"{mean:.3f}" in text  # the table shows the baseline's measured accuracy
    report = tmp_path / "runs" / "report" / "report.html"
    assert report.is_file() and f"report: {report}" in text
    html = report.read_text()
    assert "recall" in html and "data:image/png;base64," in html
    if any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        png = report.with_suffix(".png")
        assert png.is_file() and f"screenshot: {png}" in text and "ok)" in text


@pytest.mark.parametrize("lr", [3.0])
def test_demo_of_a_rejected_run_says_so_and_exits_1(tmp_path, recall_setup, lr):
    stages = {
        "baseline": eval_stage(recall_setup),
        "sft": sft_stage(recall_setup, recall_setup["data"], lr=lr, steps=4),
        "after": eval_stage(recall_setup, "${sft.final}"),
        "gate": gate_stage(),
        "release": {"kind": "release", "model": "${sft.final}", "gate": "${gate.verdict}"},
    }
    res = CliRunner().invoke(app, ["demo", "--pipeline", str(write_pipeline(tmp_path, stages))], terminal_width=200)
    text = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "gate FAIL recall.accuracy >= base - 0.15" in text and "release:" not in text
    assert (tmp_path / "runs" / "report" / "report.html").is_file()  # the report shows what went wrong
