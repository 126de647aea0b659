"""Every task's verifier spec is checked when its source loads, before any generation:
`file:line: reason` for a task file, `source task ID: reason` for a generator."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import RewardPart, TaskSourceSettings
from tempering.sources.tasks import load_tasks, read_task_file, with_reward
from tempering.verifiers.base import spec_problem


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"id": "ok", "prompt": "2+2?", "verifier": {"type": "numeric", "answer": "4"}}


@pytest.mark.parametrize(
    "spec, reason",
    [
        ({"type": "regex", "pattern": "(["}, "unterminated character set"),
        ({"type": "no_such"}, "unknown verifier type 'no_such'"),
        ({"type": "numeric"}, "needs the field 'answer'"),
        ({"type": "numeric", "answer": "four"}, "not a number"),
        ({"type": "numeric", "answer": "4", "rel_tol": -1}, "rel_tol must be >= 0"),
        ({"type": "exact"}, "needs the field 'answer'"),
        ({"type": "regex", "pattern": "a", "on": "prompt"}, "'on' must be"),
        ({"type": "math", "answer": "1", "timeout_s": 0}, "timeout_s must be a positive"),
        ({"type": "code", "tests": "assert f() == 1"}, "entry_point"),
        ({"type": "composite", "parts": []}, "non-empty list"),
        (
            {"type": "composite", "parts": [{"name": "r", "verifier": {"type": "regex", "pattern": "["}}]},
            "part 'r': bad 'regex'",
        ),
    ],
)
def test_a_spec_that_could_score_nothing_is_named_with_its_reason(spec, reason):
    problem = spec_problem(spec)
    assert problem is not None and reason in problem


def test_sound_specs_pass_the_check():
    for spec in (
        GOOD["verifier"],
        {"type": "regex", "pattern": r"\d{4}-\d\d-\d\d", "on": "completion"},
        {"type": "composite", "parts": [{"name": "n", "weight": 1, "verifier": {"type": "exact", "answer": "x"}}]},
    ):
        assert spec_problem(spec) is None


def test_a_task_file_row_with_a_bad_spec_fails_at_load_with_its_line(tmp_path):
    bad = {"id": "d", "prompt": "date?", "verifier": {"type": "regex", "pattern": "(["}}
    path = write_rows(tmp_path / "tasks.jsonl", [GOOD, bad])
    with pytest.raises(ValueError, match=r"tasks\.jsonl:2: bad 'regex' verifier spec: unterminated"):
        read_task_file(path)
    with pytest.raises(ValueError, match=r"tasks\.jsonl:2: "):
        load_tasks(TaskSourceSettings(source=str(path)))


def test_a_generated_task_and_a_merged_reward_are_checked_too():
    with pytest.raises(ValueError, match="builtin:arithmetic task .*unknown verifier type 'nope'"):
        load_tasks(TaskSourceSettings(source="builtin:arithmetic", n=2, verifier={"type": "nope"}))
    tasks = load_tasks(TaskSourceSettings(source="builtin:arithmetic", n=2))
    with pytest.raises(ValueError, match="part 'shape': bad 'regex'"):
        with_reward(tasks, [RewardPart(name="shape", verifier={"type": "regex", "pattern": "("})])


def test_eval_run_refuses_a_bad_task_row_before_loading_any_model(tmp_path):
    rows = write_rows(tmp_path / "dates.jsonl", [{"id": "a", "prompt": "2024-01-02?"}])
    suite = tmp_path / "dates.yaml"
    suite.write_text(f"name: dates\ntasks: {{source: {rows}}}\n")
    res = CliRunner().invoke(
        app, ["eval", "run", str(suite), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "dates.jsonl:1: invalid task: verifier: Field required" in res.stderr
    write_rows(rows, [{"id": "a", "prompt": "2024-01-02?", "verifier": {"type": "regex", "pattern": "(["}}])
    res = CliRunner().invoke(
        app, ["eval", "run", str(suite), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "dates.jsonl:1: bad 'regex' verifier spec" in res.stderr, res.output


def test_verify_names_a_bad_regex_in_one_line(tmp_path):
    task, completion = tmp_path / "task.json", tmp_path / "c.txt"
    task.write_text(json.dumps({"id": "t", "prompt": "x", "verifier": {"type": "regex", "pattern": "(["}}))
    completion.write_text("2024-01-02")
    res = CliRunner().invoke(app, ["verify", "--task", str(task), "--completion", str(completion)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == f"error: {task}: bad 'regex' verifier spec: unterminated character set at position 1"
