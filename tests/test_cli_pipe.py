"""The live stage table of `temper run`: statuses, a training stage's step and ETA read from its
metrics.jsonl, the gate's verdict, and the plain lines written when stderr is no terminal."""

import io
import json
from types import SimpleNamespace

from rich.console import Console

from tempering.cli.pipeline import StageBoard


def rendered(board: StageBoard) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(board.render())
    return console.file.getvalue()


def test_the_board_shows_status_steps_eta_and_the_verdict(tmp_path):
    stages = [SimpleNamespace(name=n, kind=k) for n, k in (("base", "eval"), ("sft", "sft"), ("gate", "gate"))]
    board = StageBoard(stages)
    board("base", "cached", {"hash": "a" * 64, "run_dir": tmp_path / "base"})
    board("sft", "running", {"hash": "b" * 64, "run_dir": tmp_path, "steps": 100})
    # the trainer's own record: 10 s per step from step 10 to step 40 -> 60 steps left = 10 minutes
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"time": 1000.0 + 10 * (s - 10), "step": s, "loss": 1.0}) + "\n" for s in (10, 20, 30, 40))
    )
    text = rendered(board)
    assert "cached" in text and "aaaaaaaaaaaa" in text and "pending" in text
    assert "40/100" in text and "10m00s" in text
    board("sft", "done", {"hash": "b" * 64, "run_dir": tmp_path, "summary": {}})
    board("gate", "rejected", {"summary": {"verdict": "rejected", "failed_rules": ["x.accuracy >= base"]}})
    text = rendered(board)
    assert "rejected" in text and "x.accuracy >= base" in text and "40/100" not in text


def test_not_on_a_terminal_it_prints_one_line_per_event():
    plain = Console(file=io.StringIO(), width=200)
    board = StageBoard([SimpleNamespace(name="base", kind="eval")], plain=plain)
    board("base", "running", {"hash": "c" * 64})
    board("base", "log", {"line": "suite arithmetic: 10/24 tasks"})
    board("base", "failed", {"error": "EvalError: no model"})
    lines = plain.file.getvalue().splitlines()
    assert lines[0] == "[base] running cccccccccccc"
    assert lines[1] == "[base] suite arithmetic: 10/24 tasks"
    assert lines[2].startswith("[base] failed in 0m00s cccccccccccc EvalError: no model")


def test_a_piped_dry_run_prints_every_run_dir_whole(tmp_path, monkeypatch):
    from pathlib import Path

    from typer.testing import CliRunner

    from tempering.cli import app

    monkeypatch.delenv("COLUMNS", raising=False)
    root = tmp_path / ("a-run-root-deep-enough-that-its-run-dirs-outgrow-eighty-columns" * 2)
    pipeline = Path(__file__).resolve().parents[1] / "examples" / "pipeline.yaml"
    res = CliRunner().invoke(app, ["run", str(pipeline), "--dry-run", "--out", str(root)])
    assert res.exit_code == 0, res.output
    import re

    whole = re.findall(rf"{re.escape(str(root.resolve()))}/(\w+)-([0-9a-f]+)\b", res.stdout)
    assert [(stage, len(digest)) for stage, digest in whole] == [("baseline", 12), ("synth", 12)], res.stdout
