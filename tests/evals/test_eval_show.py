"""`temper eval show`: browse a hand-written samples.jsonl."""

import json

from typer.testing import CliRunner

from tempering.cli import app

ROWS = [
    {
        "suite": "arith",
        "task_id": "a-1",
        "template": "plain",
        "seed": 0,
        "sample": 0,
        "prompt": "2+2?",
        "completion": "The answer is 4",
        "reward": 1.0,
        "passed": True,
        "status": "scored",
        "detail": "4 == 4",
    },
    {
        "suite": "arith",
        "task_id": "a-2",
        "template": "plain",
        "seed": 0,
        "sample": 0,
        "prompt": "3*3?",
        "completion": "It is 6\nreally",
        "reward": 0.0,
        "passed": False,
        "status": "scored",
        "detail": "6 != 9",
    },
    {
        "suite": "arith",
        "task_id": "a-2",
        "template": "plain",
        "seed": 1,
        "sample": 0,
        "prompt": "3*3?",
        "completion": "9",
        "reward": 1.0,
        "passed": True,
        "status": "scored",
        "detail": "",
    },
    {
        "suite": "code",
        "task_id": "c-1",
        "template": "plain",
        "seed": 0,
        "sample": 0,
        "prompt": "def f(): ...",
        "completion": "while True: pass",
        "reward": 0.0,
        "passed": False,
        "status": "timeout",
        "detail": "wall limit",
    },
    {
        "suite": "secret",
        "task_id": "9f86d081",
        "template": "plain",
        "seed": 0,
        "sample": 0,
        "reward": 0.0,
        "passed": False,
        "status": "verifier_error",
        "detail": "sandbox down",
    },
]


def run_dir(tmp_path):
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return tmp_path


def show(*args):
    res = CliRunner().invoke(app, ["eval", "show", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_table_of_every_sample(tmp_path):
    text = show(run_dir(tmp_path))
    for cell in [
        "a-1",
        "c-1",
        "9f86d081",
        "timeout",
        "verifier_error",
        "The answer is 4",
        "It is 6\\nreally",
        "(private)",
    ]:
        assert cell in text, cell
    assert "5 shown of 5 matching (2 passed); 5 in the file" in text


def test_filters_and_limit(tmp_path):
    d = run_dir(tmp_path)
    text = show(d, "--failed")
    assert "a-1 " not in text and "3 shown of 3 matching (0 passed)" in text
    text = show(d, "--suite", "arith", "--failed")
    assert "1 shown of 1 matching" in text and "c-1" not in text
    assert "2 shown of 5 matching" in show(d, "--limit", "2")
    assert "5 shown of 5 matching" in show(d / "samples.jsonl", "--limit", "0")


def test_task_shows_full_panels(tmp_path):
    text = show(run_dir(tmp_path), "--task", "a-2")
    assert "3*3?" in text and "It is 6" in text and "really" in text and "6 != 9" in text
    assert "seed 1" in text and "2 shown of 2 matching (1 passed)" in text


def test_bad_input_is_one_line(tmp_path):
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path)])
    assert res.exit_code == 2 and "samples.jsonl: not found" in res.stderr and "Traceback" not in res.output
    (tmp_path / "samples.jsonl").write_text(json.dumps(ROWS[0]) + "\n{broken\n")
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path)])
    assert res.exit_code == 2 and "samples.jsonl:2: not JSON" in res.stderr
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path), "--limit", "-1"])
    assert res.exit_code == 2 and "--limit" in res.stderr


def test_a_suite_or_task_not_in_the_run_is_an_error_listing_those_there(tmp_path):
    d = run_dir(tmp_path)
    suites = sorted({r["suite"] for r in ROWS})
    res = CliRunner().invoke(app, ["eval", "show", str(d), "--suite", "nosuch"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == f"error: --suite 'nosuch': not in {d} (suites there: {', '.join(suites)})"
    res = CliRunner().invoke(app, ["eval", "show", str(d), "--task", "zz-9"])
    assert res.exit_code == 2 and "task ids there: " in res.stderr and "a-1" in res.stderr
