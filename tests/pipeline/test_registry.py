"""The registry on both backends: an SQLite file and a real PostgreSQL server (see tests/pg_server.py)."""

import json
import multiprocessing
import sqlite3
import time

import pytest
import sqlalchemy as sa

from tempering.runs.registry import (
    MARKER,
    REGISTRY_ENV,
    SCHEMA_VERSION,
    Registry,
    RegistryError,
    describe_input,
    file_sha256,
    read_marker,
)


def test_runs_are_recorded_with_input_hashes(tmp_path, registry_location):
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    reg = Registry(registry_location)
    run_id = reg.start("r1", "sft", {"lr": 1}, [describe_input(data, "train")], "base-model")
    assert reg.get(run_id)["status"] == "running"
    reg.finish(run_id, {"final": "x"}, {"loss": 0.5})
    row = reg.get("r1")
    assert row["status"] == "finished" and row["inputs"] == {str(data): file_sha256(data)}
    assert row["metrics"] == {"loss": 0.5} and row["config"] == {"lr": 1}
    assert [(i.role, i.path) for i in reg.inputs(run_id)] == [("train", str(data)), ("base_model", "base-model")]
    failed = reg.start("r2", "sft", {}, [], None)
    reg.fail(failed, "boom")
    assert reg.get(failed)["error"] == "boom"
    assert [r["name"] for r in reg.list()] == ["r2", "r1"]
    assert reg.remove([failed]) == 1 and reg.latest("r2") is None
    reg.close()


def test_newer_schema_is_refused(registry_location):
    Registry(registry_location).close()
    url = registry_location if "://" in registry_location else f"sqlite:///{registry_location}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE schema_version SET version={SCHEMA_VERSION + 1}")
    engine.dispose()
    with pytest.raises(RegistryError, match="newer than this Tempering"):
        Registry(registry_location)


def test_outputs_carry_content_hashes_and_markers(tmp_path, registry_location):
    final, kept = tmp_path / "final", tmp_path / "kept.jsonl"
    final.mkdir()
    (final / "model.safetensors").write_bytes(b"weights")
    kept.write_text('{"a": 1}\n')
    with Registry(registry_location) as reg:
        run_id = reg.start("r", "sft", {}, [], None)
        reg.record_output(run_id, "kept", kept)
        reg.record_output(run_id, "final", final)
        reg.record_output(run_id, "run_dir", tmp_path)
        outs = {o["role"]: o for o in reg.outputs(run_id)}
        assert outs["kept"]["sha256"] == file_sha256(kept)
        # the checkpoint's hash leaves the marker out, so it does not change when the marker is written
        assert outs["final"]["sha256"] == file_sha256(final, exclude={MARKER}) and (final / MARKER).is_file()
        assert outs["run_dir"]["sha256"] is None
        assert read_marker(final) == {"registry": reg.location, "run_id": run_id, "run": "r", "role": "final"}
        assert reg.run_for_output(final)["id"] == run_id
        assert reg.identify_model(final) == (run_id, str(final.resolve()), outs["final"]["sha256"])


def _write(path, text):
    path.write_text(text)
    return path


def test_lineage_walks_data_passes_by_content_hash_and_models_by_marker(tmp_path, registry_location):
    raw, held = _write(tmp_path / "raw.jsonl", "a\na\nb\n"), _write(tmp_path / "held.jsonl", "h\n")
    with Registry(registry_location) as reg:
        dedup = reg.start("dedup", "dedup", {}, [describe_input(raw, "train")], None)
        kept = _write(tmp_path / "kept.jsonl", "a\nb\n")
        reg.record_output(dedup, "kept", kept)
        reg.finish(dedup, {}, {"removed": 1})
        # the kept rows are copied elsewhere: the bytes, not the path, link them to the dedup
        copied = _write(tmp_path / "copy.jsonl", kept.read_text())
        sft = reg.start("sft", "sft", {}, [describe_input(copied, "train"), describe_input(held, "eval")], "base")
        final = tmp_path / "sft-final"
        final.mkdir()
        reg.record_output(sft, "final", final)
        reg.finish(sft, {}, {})
        grpo = reg.start("grpo", "grpo", {}, [describe_input(held, "tasks")], str(final))
        # a file written after a run started never explains that run (the walk goes back in time)
        later = reg.start("later", "dedup", {}, [], None)
        reg.record_output(later, "kept", held)
        rows = [(r.depth, r.run_name, r.role, r.path, r.parent_run) for r in reg.lineage(grpo)]
    assert rows == [
        (0, "grpo", "tasks", str(held), None),
        (0, "grpo", "base_model", str(final), sft),
        (1, "sft", "train", str(copied), dedup),
        (1, "sft", "eval", str(held), None),
        (1, "sft", "base_model", "base", None),
        (2, "dedup", "train", str(raw), None),
    ]


def test_evals_are_recorded_with_report_hash_and_gate(tmp_path, registry_location):
    final = tmp_path / "final"
    final.mkdir()
    report = _write(tmp_path / "results.json", json.dumps({"suites": []}))
    gate = {"passed": True, "rules": [{"rule": "arith.accuracy >= 0.5", "passed": True, "detail": "0.8"}]}
    with Registry(registry_location) as reg:
        run_id = reg.start("r", "sft", {}, [], None)
        reg.record_output(run_id, "final", final)
        eval_id = reg.record_eval(final, report, metrics={"arith.accuracy": 0.8}, gate=gate)
        row = reg.get_eval(eval_id)
        assert row["run_id"] == run_id and row["report_sha256"] == file_sha256(report)
        assert row["gate"] == gate and row["passed"] is True and row["metrics"] == {"arith.accuracy": 0.8}
        assert row["model_sha256"] == reg.outputs(run_id)[0]["sha256"]
        assert [e["id"] for e in reg.evals(run_id=run_id)] == [eval_id] == [e["id"] for e in reg.evals(model=final)]
        with pytest.raises(FileNotFoundError, match="eval report not found"):
            reg.record_eval(final, tmp_path / "missing.json")


def _writer(location, tag, n, barrier):
    with Registry(location) as reg:
        barrier.wait()
        for i in range(n):
            run_id = reg.start(f"{tag}-{i}", "sft", {"i": i}, [], f"base-{tag}")
            reg.record_output(run_id, "final", f"/nowhere/{tag}/{i}")
            reg.finish(run_id, {}, {"i": i})
            time.sleep(0.01)  # a run does some work between writes; without it one SQLite writer starves the other


def test_two_processes_writing_at_once_lose_nothing(registry_location):
    Registry(registry_location).close()
    ctx = multiprocessing.get_context("spawn")
    barrier, n = ctx.Barrier(2), 40
    procs = [ctx.Process(target=_writer, args=(registry_location, tag, n, barrier)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with Registry(registry_location) as reg:
        rows = reg.list(limit=1000)
        assert sorted(r["name"] for r in rows) == sorted(f"{t}-{i}" for t in "ab" for i in range(n))
        assert all(r["status"] == "finished" for r in rows)
        order = [r["name"][0] for r in sorted(rows, key=lambda r: r["started_at"])]
        assert sum(x != y for x, y in zip(order, order[1:])) >= 2  # the writers really did interleave
        assert all(len(reg.inputs(r["id"])) == 1 and len(reg.outputs(r["id"])) == 1 for r in rows)


def test_open_picks_url_then_environment_then_run_root(tmp_path, monkeypatch, registry_location):
    monkeypatch.delenv(REGISTRY_ENV, raising=False)
    with Registry.open(tmp_path / "root") as reg:
        assert reg.path == tmp_path / "root" / "registry.sqlite" and reg.dialect == "sqlite"
    monkeypatch.setenv(REGISTRY_ENV, registry_location)
    with Registry.open(tmp_path / "root") as reg:
        reg.start("via-env", "sft", {}, [], None)
    with Registry(registry_location) as reg:
        assert reg.latest("via-env") is not None
    with Registry(registry_location.replace("postgres@", "postgres:secret@")) as reg:
        assert "secret" not in reg.location


def test_unreachable_server_is_one_line_error():
    with pytest.raises(RegistryError, match=r"cannot open the registry") as err:
        Registry("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert "\n" not in str(err.value) and "postgresql+psycopg://nobody@127.0.0.1:1/none" in str(err.value)


V2_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    base_model TEXT, config TEXT NOT NULL, inputs TEXT NOT NULL, outputs TEXT NOT NULL DEFAULT '{}',
    metrics TEXT NOT NULL DEFAULT '{}', error TEXT, started_at REAL NOT NULL, finished_at REAL);
CREATE TABLE run_inputs (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, role TEXT NOT NULL,
    path TEXT NOT NULL, sha256 TEXT, parent_run TEXT);
CREATE TABLE run_outputs (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, role TEXT NOT NULL,
    path TEXT NOT NULL);
CREATE INDEX run_inputs_run ON run_inputs(run_id);
CREATE INDEX run_outputs_path ON run_outputs(path);
INSERT INTO schema_version VALUES (2);
INSERT INTO runs VALUES ('a', 'a', 'sft', 'finished', 'base', '{}', '{}', '{}', '{}', NULL, 1, 2);
INSERT INTO runs VALUES ('b', 'b', 'grpo', 'finished', '/x/a/final', '{}', '{}', '{}', '{}', NULL, 3, 4);
INSERT INTO run_inputs VALUES ('a', 'train', 't2.jsonl', 'h2', NULL), ('a', 'train', 't1.jsonl', 'h1', NULL),
    ('a', 'base_model', 'base', NULL, NULL), ('b', 'base_model', '/x/a/final', NULL, 'a');
INSERT INTO run_outputs VALUES ('a', 'final', '/x/a/final');
"""


def test_v2_sqlite_registry_is_migrated_keeping_row_order(tmp_path):
    path = tmp_path / "registry.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(V2_SCHEMA)
    with Registry(path) as reg:
        assert [(r.run_name, r.path) for r in reg.lineage("b")] == [
            ("b", "/x/a/final"),
            ("a", "t2.jsonl"),
            ("a", "t1.jsonl"),
            ("a", "base"),
        ]
        assert reg.run_for_output("/x/a/final")["id"] == "a"
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")} >= {
            "runs",
            "run_inputs",
            "run_outputs",
            "evals",
            "releases",
            "alias_events",
        }
        assert not db.execute("SELECT name FROM sqlite_master WHERE name LIKE '%_v2'").fetchall()
