"""Run safety and lineage through the real commands on a tiny model: finished re-runs,
changed configs, corrupted checkpoints, locks, names, exports that keep their lineage."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_tasks
from tempering.evals.leakage import contaminated_rows, training_lineage
from tempering.evals.suite import read_suite
from tempering.runs.registry import Registry, read_marker
from tests.conftest import tiny_llama
from tests.evals.conftest import recall_tasks, sft_row, write_jsonl, write_suite

EVAL = recall_tasks(12, seed=1)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(res, code=2):
    assert res.exit_code == code, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    return " ".join(res.output.split())


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=len(smol_tokenizer), tie=True)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def sft_yaml(tmp_path, tiny_dir):
    """LoRA SFT whose training data holds 4 tasks of the `recall` eval suite."""
    rows = [sft_row(f"what is {i} plus {i}?", str(2 * i)) for i in range(16)]
    rows += [sft_row(EVAL[i]["prompt"], EVAL[i]["verifier"]["answer"]) for i in range(4)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    evals = write_jsonl(tmp_path / "eval.jsonl", rows[:4])
    cfg = {
        "model": str(tiny_dir),
        "lora": {"r": 4, "alpha": 8},
        "data": {"train": [str(train)], "eval": [str(evals)], "max_length": 64},
        "train": {"steps": 2, "batch_size": 4, "precision": "fp32", "optim": {"lr": 1e-3}},
        "out": str(tmp_path / "runs"),
        "name": "x",
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def finished_rows(tmp_path):
    with sqlite3.connect(tmp_path / "runs" / "registry.sqlite") as db:
        return db.execute("SELECT count(*) FROM runs WHERE status='finished'").fetchone()[0]


def test_sft_resume_rules_and_lineage_through_export(tmp_path, sft_yaml):
    res = run("sft", sft_yaml)
    assert res.exit_code == 0, res.output
    run_dir = tmp_path / "runs" / "x"
    summary = (run_dir / "summary.json").read_text()
    run_id = json.loads(summary)["run_id"]

    # the files behind the checkpoint, in their roles, come from one registry query
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        roles = [(r.role, Path(r.path).name) for r in reg.lineage(run_id)]
    base = Path(yaml.safe_load(sft_yaml.read_text())["model"]).name
    assert roles == [("train", "train.jsonl"), ("eval", "eval.jsonl"), ("base_model", base)]

    # a finished run is reported, not redone; summary and registry untouched
    res = run("sft", sft_yaml)
    assert res.exit_code == 0 and "already finished" in " ".join(res.output.split())
    assert (run_dir / "summary.json").read_text() == summary and finished_rows(tmp_path) == 1

    # a changed LoRA rank (or lr) on resume is refused with the diff, in one line
    msg = one_line_error(run("sft", sft_yaml, "--steps", "3", "--set", "lora.r=8", "--set", "train.optim.lr=0.01"))
    assert "lora.r: 4 -> 8" in msg and "train.optim.lr: 0.001 -> 0.01" in msg and "--force" in msg

    # the newest checkpoint corrupted -> warning, resume from the previous verified one
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    (newest / "weights.safetensors").write_bytes(b"not a tensor file")
    res = run("sft", sft_yaml, "--steps", "3")
    assert res.exit_code == 0, res.output
    assert "failed verification" in " ".join(res.output.split())
    assert json.loads((run_dir / "summary.json").read_text())["resumed_from"] == 0
    for ckpt in (run_dir / "checkpoints").glob("step-*"):  # now every checkpoint is bad
        (ckpt / "state.json").write_text("{}")
    msg = one_line_error(run("sft", sft_yaml, "--steps", "4"))
    assert "corrupted" in msg and "no older checkpoint verifies" in msg

    # the export keeps its lineage, so the contamination scan still sees the planted rows
    suite = read_suite(write_suite(tmp_path, "recall", write_jsonl(tmp_path / "suite.jsonl", EVAL)))
    final = run_dir / "final"
    assert len(contaminated_rows(training_lineage(final).files, [suite]).rows["recall"]) == 4
    merged = tmp_path / "merged"
    res = run("export", final, "--out", merged, "--dtype", "bf16")
    assert res.exit_code == 0, res.output
    assert json.loads((merged / "config.json").read_text())["dtype"] == "bfloat16"
    lineage = training_lineage(merged)
    assert lineage.runs[0].startswith("export-x-") and "x" in lineage.runs
    assert [f.name for f in lineage.files] == ["train.jsonl"]
    assert len(contaminated_rows(lineage.files, [suite]).rows["recall"]) == 4

    # export into a non-empty dir is refused unless --force
    msg = one_line_error(run("export", final, "--out", merged))
    assert "not empty" in msg and "--force" in msg
    res = run("export", final, "--out", merged, "--force")
    assert res.exit_code == 0, res.output
    assert read_marker(merged)["run"].startswith("export-x-") and (merged / "model.safetensors").is_file()


def test_bad_name_and_locked_run_are_one_line_errors(tmp_path, sft_yaml):
    msg = one_line_error(run("sft", sft_yaml, "--name", "../../escape"))
    assert "would leave the run root" in msg
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()

    code = (
        "import sys; from pathlib import Path; from tempering.runs.stage import run_lock\n"
        f"with run_lock(Path({str(tmp_path / 'runs' / 'x')!r})):\n"
        "    print('locked', flush=True); sys.stdin.readline()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        msg = one_line_error(run("sft", sft_yaml))
        assert f"in use by another process (pid {holder.pid})" in msg
    finally:
        holder.stdin.close()
        holder.wait()


def test_grpo_lineage_is_the_same_query(tmp_path, tiny_dir):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in arithmetic_tasks(16, 0, "train", "+")))
    cfg = {
        "model": str(tiny_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": str(tasks)},
        "heldout": None,
        "grpo": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "dynamic_sampling": False},
        "train": {"steps": 1, "precision": "fp32"},
        "out": str(tmp_path / "runs"),
        "name": "g",
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = run("grpo", path)
    assert res.exit_code == 0, res.output
    final = tmp_path / "runs" / "g" / "final"
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        rows = reg.lineage(read_marker(final)["run_id"])
    assert [(r.run_name, r.role, r.path) for r in rows] == [
        ("g", "tasks", str(tasks)),
        ("g", "base_model", str(tiny_dir)),
    ]
    assert training_lineage(final).files == [tasks]
