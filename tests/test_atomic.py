"""Atomic writes: the target holds the old bytes or the new ones, never half, and no temp file stays."""

import hashlib
import json

import pytest

from tempering.atomic import AtomicJsonl, atomic_path, write_jsonl_atomic, write_text_atomic


def test_a_text_write_replaces_the_file_whole_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "record.json"
    write_text_atomic(path, "old")
    write_text_atomic(path, "new é")
    assert path.read_text(encoding="utf-8") == "new é"
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_a_writer_that_raises_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "steps.parquet"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["steps.parquet"]


def test_jsonl_with_a_sidecar_writes_the_sha256sum_line_of_the_bytes(tmp_path):
    path = tmp_path / "out.jsonl"
    rows, digest = write_jsonl_atomic(path, [{"a": 1}, {"b": "ü"}], sidecar=True)
    body = b'{"a": 1}\n{"b": "\xc3\xbc"}\n'  # one json.dumps per line, UTF-8 (not \u escapes)
    assert path.read_bytes() == body
    assert (rows, digest) == (2, hashlib.sha256(body).hexdigest())
    assert (tmp_path / "out.jsonl.sha256").read_text() == f"{digest}  out.jsonl\n"


def test_jsonl_without_a_sidecar_still_returns_the_digest_and_writes_only_the_file(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows, digest = write_jsonl_atomic(path, iter([{"x": 1}]), sidecar=False)
    assert (rows, digest) == (1, hashlib.sha256(b'{"x": 1}\n').hexdigest())
    assert [p.name for p in tmp_path.iterdir()] == ["samples.jsonl"]


def test_a_bad_row_midway_leaves_no_output_no_sidecar_and_no_temp(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(TypeError):
        with AtomicJsonl(path, sidecar=True) as writer:
            writer.write({"ok": 1})
            writer.write({"bad": object()})
    assert list(tmp_path.iterdir()) == []


def test_jsonl_rows_read_back_as_written(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"id": i, "text": "x" * i} for i in range(5)]
    write_jsonl_atomic(path, rows, sidecar=False)
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows
