"""A new user's flow exactly as the docs recommend, through the real commands on the tiny recall
model: `temper data dedup` -> `temper data decontam` -> `temper sft` -> `temper eval run` ->
`temper eval compare --gate` with `contamination == 0`.

The gate passes a model whose training file is clean, though the files upstream of decontam
held a leak (the model never read them); a leak decontam missed fails the gate, naming the line
of the file the model trained on."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from tempering.cli import app
from tempering.evals.results import EvalResults
from tests.evals.conftest import env, recall_dir, recall_model, recall_tasks, sft_row, write_jsonl, write_suite  # noqa: F401


def temper(*args) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok(*args) -> str:
    result = temper(*args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def project(env, recall_model, recall_dir, monkeypatch):
    """The recall suite (20 tasks), a base eval, and `train_all.jsonl`: 24 clean rows, one of
    them twice, and a planted leak of suite task 3 (line 6)."""
    _, _, rows = recall_model
    monkeypatch.chdir(env)
    write_suite(env, "recall", write_jsonl(env / "recall.jsonl", rows[:20]), sampling={"n": 2, "max_new_tokens": 3})
    clean = [
        sft_row(r["prompt"], r["verifier"]["answer"]) for r in recall_tasks(24, 7, exclude={r["prompt"] for r in rows})
    ]
    leak = sft_row(rows[3]["prompt"], rows[3]["verifier"]["answer"])
    write_jsonl(env / "train_all.jsonl", clean[:5] + [leak, clean[0]] + clean[5:])
    (env / "gate.yaml").write_text(yaml.safe_dump({"rules": ["contamination == 0"]}))
    ok("eval", "run", "recall.yaml", "--model", recall_dir, "--out", "base", "--seeds", 1, "--threads", 1)
    return env


def train_eval_gate(env: Path, model: Path, trained: str, name: str):
    """SFT on `trained`, evaluate the final model, gate it against the base eval."""
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {"train": [trained], "max_length": 32, "packing": False, "tool_call_style": "template"},
        "train": {"steps": 2, "batch_size": 4, "precision": "fp32", "threads": 1, "optim": {"lr": 1e-5}},
        "out": "runs",
    }
    (env / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    ok("sft", f"{name}.yaml", "--name", name)
    ok("eval", "run", "recall.yaml", "--model", f"runs/{name}/final", "--out", f"eval-{name}", "--seeds", 1)
    gate = temper("eval", "compare", "base", f"eval-{name}", "--gate", "gate.yaml")
    return EvalResults.load(env / f"eval-{name}" / "results.json").suite("recall"), gate


def test_dedup_decontam_sft_eval_gate_passes_a_clean_model(project, recall_dir):
    dedup = json.loads(ok("data", "dedup", "train_all.jsonl", "-o", "train_dedup.jsonl").splitlines()[-1])
    assert dedup["exact_duplicates"] == 1
    decontam = ok("data", "decontam", "train_dedup.jsonl", "--against", "recall.yaml", "-o", "train_clean.jsonl")
    assert json.loads(decontam.splitlines()[-1])["matched_rows"] == 1  # the planted leak is removed

    suite, gate = train_eval_gate(project, recall_dir, "train_clean.jsonl", "clean")
    assert suite.contamination_hits == 0 and suite.contaminated_rows == [], suite.contaminated_rows
    assert gate.exit_code == 0 and "gate passed" in gate.output, gate.output


def test_a_leak_decontam_missed_fails_the_gate_naming_the_trained_files_line(project, recall_model, recall_dir):
    _, _, rows = recall_model
    ok("data", "dedup", "train_all.jsonl", "-o", "train_dedup.jsonl")
    # decontaminated against last month's suite, which did not have task 3 yet
    (project / "old").mkdir()
    old = write_suite(project / "old", "recall", write_jsonl(project / "old.jsonl", rows[4:20]))
    ok("data", "decontam", "train_dedup.jsonl", "--against", old, "-o", "train_leaky.jsonl")

    suite, gate = train_eval_gate(project, recall_dir, "train_leaky.jsonl", "leaky")
    trained_line = str(project / "train_leaky.jsonl") + ":6"
    assert suite.contaminated_rows == [trained_line]  # not train_all.jsonl nor train_dedup.jsonl
    output = " ".join(gate.output.split())
    assert gate.exit_code == 1 and "gate failed" in output, output
    assert "FAIL contamination == 0: 1 contaminated training rows" in output and "train_leaky.jsonl:6" in output
