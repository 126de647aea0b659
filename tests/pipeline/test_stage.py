"""The stage runner's rules, with a real registry, real locks and real checkpoints (no model)."""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
import torch

from tempering.runs.registry import Registry, describe_input, read_marker
from tempering.runs.stage import (
    ConfigChanged,
    InvalidRunName,
    RunLocked,
    StageSpec,
    prune_failed,
    run_lock,
    run_stage,
    validate_run_name,
)
from tempering.train.checkpoint import CheckpointError, fall_back_to_verified, list_checkpoints, save_checkpoint


def spec(tmp_path, name="r", lr=0.1, steps=2, force=False, data=None):
    data = data or tmp_path / "train.jsonl"
    if not data.exists():
        data.write_text('{"x": 1}\n')
    cfg = {"train": {"steps": steps, "optim": {"lr": lr}}, "lora": {"r": 4}, "name": name}
    return StageSpec(
        "sft", str(tmp_path / "runs"), name, cfg, [describe_input(data, "train")], None, steps, force=force
    )


def fake_run(s, steps_done=None):
    """A stage body that 'trains' by writing a checkpoint, then finishes."""
    with run_stage(s) as stage:
        if stage.finished:
            return stage.result
        save_checkpoint(stage.run_dir / "checkpoints", steps_done or s.steps, {"w": torch.zeros(2)}, {}, {}, 2)
        stage.finish({"steps": steps_done or s.steps}, {})
    return stage.result


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", ".hidden", "", "  ", "a\x00b", "x" * 200])
def test_bad_run_names_are_refused(name):
    with pytest.raises(InvalidRunName):
        validate_run_name(name)


def test_escaping_name_writes_nothing_outside_the_root(tmp_path):
    with pytest.raises(InvalidRunName, match="would leave the run root"):
        with run_stage(spec(tmp_path, name="../../escape")):
            pass
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "escape").exists()
    assert validate_run_name("2024") == "2024" and validate_run_name("sft-a.v2_1") == "sft-a.v2_1"


def test_second_holder_of_a_run_dir_gets_the_pid(tmp_path):
    with run_lock(tmp_path / "r"):
        with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
            with run_lock(tmp_path / "r"):
                pass
    with run_lock(tmp_path / "r"):  # released: free again
        pass


def test_lock_held_by_another_process(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from tempering.runs.stage import run_lock
        from pathlib import Path
        with run_lock(Path({str(tmp_path / "runs" / "r")!r})):
            print("locked", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunLocked, match=f"pid {proc.pid}"):
            fake_run(spec(tmp_path))
    finally:
        proc.stdin.close()
        proc.wait()
    assert fake_run(spec(tmp_path)).summary["steps"] == 2  # holder gone: the run goes ahead


def test_changed_config_on_resume_is_refused_with_the_diff_unless_forced(tmp_path):
    fake_run(spec(tmp_path, steps=2))
    with pytest.raises(ConfigChanged, match=r"train.optim.lr: 0.1 -> 0.2"):
        fake_run(spec(tmp_path, lr=0.2, steps=4))
    (tmp_path / "train.jsonl").write_text('{"x": 2}\n')
    with pytest.raises(ConfigChanged, match="content changed"):
        fake_run(spec(tmp_path, steps=4))
    assert fake_run(spec(tmp_path, lr=0.2, steps=4, force=True)).summary["steps"] == 4


def test_rerunning_a_finished_run_keeps_its_summary_and_registry(tmp_path):
    first = fake_run(spec(tmp_path))
    summary = (first.run_dir / "summary.json").read_text()
    again = fake_run(spec(tmp_path))
    assert again.already_finished and again.run_id == first.run_id
    assert (first.run_dir / "summary.json").read_text() == summary
    with sqlite3.connect(tmp_path / "runs" / "registry.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs WHERE status='finished'").fetchone()[0] == 1


def test_failed_runs_without_a_run_dir_are_pruned(tmp_path):
    root = tmp_path / "runs"
    with Registry(root / "registry.sqlite") as reg:
        gone, kept = reg.start("gone", "sft", {}, [], None), reg.start("kept", "sft", {}, [], None)
        reg.fail(gone, "boom")
        reg.fail(kept, "boom")
        (root / "kept").mkdir()
        assert prune_failed(reg, root) == ["gone"]
        assert [r["name"] for r in reg.list()] == ["kept"]


def test_failure_is_recorded_and_reraised(tmp_path):
    with pytest.raises(KeyError):
        with run_stage(spec(tmp_path)):
            raise KeyError("x")
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        assert reg.get("r")["status"] == "failed" and "KeyError" in reg.get("r")["error"]


def _checkpoints(root, steps):
    for s in steps:
        save_checkpoint(root, s, {"w": torch.full((2,), float(s))}, {}, {"step": s}, keep_last=10)


def test_corrupted_newest_checkpoint_falls_back_to_the_previous_verified(tmp_path):
    root = tmp_path / "checkpoints"
    _checkpoints(root, [2, 4])
    (root / "step-00000004" / "weights.safetensors").write_bytes(b"garbage")
    aside = fall_back_to_verified(root)
    assert [p.name for p in aside] == ["corrupt-step-00000004"]
    assert [p.name for p in list_checkpoints(root)] == ["step-00000002"]


def test_no_verified_checkpoint_is_one_clear_error(tmp_path):
    root = tmp_path / "checkpoints"
    _checkpoints(root, [2])
    (root / "step-00000002" / "state.json").write_text("{}")
    with pytest.raises(CheckpointError, match="corrupted.*no older checkpoint verifies"):
        fall_back_to_verified(root)
    assert [p.name for p in list_checkpoints(root)] == ["step-00000002"]  # nothing moved


V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    base_model TEXT, config TEXT NOT NULL, inputs TEXT NOT NULL, outputs TEXT NOT NULL DEFAULT '{}',
    metrics TEXT NOT NULL DEFAULT '{}', error TEXT, started_at REAL NOT NULL, finished_at REAL);
INSERT INTO schema_version VALUES (1);
"""


def test_v1_registry_is_migrated_with_roles_parents_and_markers(tmp_path):
    root = tmp_path / "runs"
    for name in ("a", "b"):
        (root / name / "final").mkdir(parents=True)
    files = {n: tmp_path / f"{n}.jsonl" for n in ("ta", "ea", "tb", "task")}
    for f in files.values():
        f.write_text("{}\n")
    sha = {n: describe_input(f, "train").sha256 for n, f in files.items()}
    a_cfg = {"data": {"train": [str(files["ta"])], "eval": [str(files["ea"])], "replay": None}}
    b_cfg = {"tasks": {"source": str(files["task"])}, "heldout": None}
    with sqlite3.connect(root / "registry.sqlite") as db:
        db.executescript(V1_SCHEMA)
        db.execute(
            "INSERT INTO runs VALUES ('ida','a','sft','finished','base',?,?,?,'{}',NULL,1,2)",
            (
                json.dumps(a_cfg),
                json.dumps({str(files["ta"]): sha["ta"], str(files["ea"]): sha["ea"]}),
                json.dumps({"final": str(root / "a" / "final")}),
            ),
        )
        db.execute(
            "INSERT INTO runs VALUES ('idb','b','grpo','finished',?,?,?,?,'{}',NULL,3,4)",
            (
                str(root / "a" / "final"),
                json.dumps(b_cfg),
                json.dumps({str(files["task"]): sha["task"]}),
                json.dumps({"final": str(root / "b" / "final")}),
            ),
        )
    with Registry(root / "registry.sqlite") as reg:
        rows = [(r.run_name, r.role, r.path) for r in reg.lineage("idb")]
    assert rows == [
        ("b", "tasks", str(files["task"])),
        ("b", "base_model", str(root / "a" / "final")),
        ("a", "train", str(files["ta"])),
        ("a", "eval", str(files["ea"])),
        ("a", "base_model", "base"),
    ]
    assert read_marker(root / "b" / "final")["run_id"] == "idb"


def test_runs_prune_command(tmp_path):
    from typer.testing import CliRunner

    from tempering.cli import app

    with Registry(tmp_path / "registry.sqlite") as reg:
        reg.fail(reg.start("crashed", "sft", {}, [], None), "ValueError: no rows")
        reg.finish(reg.start("done", "sft", {}, [], None), {}, {})
    res = CliRunner().invoke(app, ["runs", "prune", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "removed 1 failed run(s) without a run dir: crashed" in res.stdout
    listed = CliRunner().invoke(app, ["runs", "ls", "--root", str(tmp_path)]).stdout
    assert "done" in listed and "crashed" not in listed


def test_an_interrupted_then_resumed_run_is_one_run_resumed_not_a_failure(tmp_path):
    from typer.testing import CliRunner

    from tempering.cli import app

    s = spec(tmp_path, steps=4)
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C after the first checkpoint
        with run_stage(s) as stage:
            save_checkpoint(stage.run_dir / "checkpoints", 2, {"w": torch.zeros(2)}, {}, {}, 2)
            raise KeyboardInterrupt
    resumed = fake_run(s)
    assert resumed is not None and resumed.run_id is not None
    listed = CliRunner().invoke(app, ["runs", "ls", "--root", str(tmp_path / "runs")])
    rows = [line for line in listed.stdout.splitlines() if " r " in f" {line} "]
    assert listed.exit_code == 0 and len(rows) == 1, listed.stdout
    assert resumed.run_id in rows[0] and "finished (resumed)" in rows[0] and "failed" not in listed.stdout
    with sqlite3.connect(tmp_path / "runs" / "registry.sqlite") as db:
        attempts = db.execute("SELECT id, status, error FROM runs WHERE name='r' ORDER BY started_at").fetchall()
    assert [a[1] for a in attempts] == ["resumed", "finished"]  # the attempt stays on record, as resumed
    assert attempts[0][2] == f"KeyboardInterrupt: ; resumed by {resumed.run_id}"
    shown = CliRunner().invoke(app, ["runs", "show", "r", "--root", str(tmp_path / "runs")]).stdout
    assert f"resumed attempt {attempts[0][0]}" in shown and "KeyboardInterrupt" in shown, shown
