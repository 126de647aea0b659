import sqlite3

import pytest

from tempering.pipeline.registry import SCHEMA_VERSION, Registry, describe_input, file_sha256


def test_runs_are_recorded_with_input_hashes(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    reg = Registry(tmp_path / "registry.sqlite")
    run_id = reg.start("r1", "sft", {"lr": 1}, [describe_input(data, "train")], "base-model")
    assert reg.get(run_id)["status"] == "running"
    reg.finish(run_id, {"final": "x"}, {"loss": 0.5})
    row = reg.get("r1")
    assert row["status"] == "finished" and row["inputs"] == {str(data): file_sha256(data)}
    assert row["metrics"] == {"loss": 0.5} and row["config"] == {"lr": 1}
    failed = reg.start("r2", "sft", {}, [], None)
    reg.fail(failed, "boom")
    assert reg.get(failed)["error"] == "boom"
    assert [r["name"] for r in reg.list()] == ["r2", "r1"]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "registry.sqlite"
    Registry(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer than this Tempering"):
        Registry(path)
