"""Input files as users actually have them: stray bytes, BOMs, empty files, .json arrays."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.io import NoRows, iter_rows, load_rows

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
LINE = json.dumps(GOOD).encode()


def test_one_non_utf8_byte_quarantines_only_its_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    bad = json.dumps(
        {"messages": [{"role": "user", "content": "caf\u00e9"}, {"role": "assistant", "content": "ok"}]}
    ).replace("\\u00e9", "\u00e9")
    path.write_bytes(LINE + b"\n" + bad.encode("latin-1") + b"\n" + LINE + b"\n")
    result = load_rows([str(path)])
    assert result.summary() == {"rows": 3, "valid": 2, "quarantined": 1}
    err = result.errors[0]
    assert str(err).startswith(f"{path}:2: not UTF-8 (byte 0xe9")
    assert "caf\ufffd" in err.raw  # the raw line is kept (undecodable byte replaced) for the quarantine file


def test_utf8_bom_does_not_spoil_row_one(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + LINE + b"\n" + LINE + b"\r\n")
    assert load_rows([str(path)]).summary() == {"rows": 2, "valid": 2, "quarantined": 0}
    as_json = tmp_path / "bom.json"
    as_json.write_bytes(b"\xef\xbb\xbf" + json.dumps([GOOD, GOOD]).encode())
    assert load_rows([str(as_json)]).summary() == {"rows": 2, "valid": 2, "quarantined": 0}


@pytest.mark.parametrize("content", [b"", b"\n  \n", b"[]"])
def test_empty_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / ("empty.json" if content == b"[]" else "empty.jsonl")
    path.write_bytes(content)
    with pytest.raises(NoRows, match="no rows"):
        load_rows([str(path)])
    res = CliRunner().invoke(app, ["data", "validate", str(path), "--no-render"])
    assert res.exit_code == 1
    assert f"{path}: no rows" in " ".join(res.stderr.split())


def test_empty_training_file_fails_sft_naming_it(tmp_path):
    import yaml

    (tmp_path / "train.jsonl").write_text("")
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"data": {"train": str(tmp_path / "train.jsonl")}, "train": {"steps": 1}, "out": str(tmp_path / "runs")}
        )
    )
    res = CliRunner().invoke(app, ["sft", str(cfg)])
    assert res.exit_code == 2
    assert f"{tmp_path / 'train.jsonl'}: no rows" in " ".join(res.stderr.split())


def test_json_array_file_is_read_row_by_row(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([GOOD, {"messages": []}, GOOD], indent=2))
    result = load_rows([str(path)])
    assert result.summary() == {"rows": 3, "valid": 2, "quarantined": 1}
    assert str(result.errors[0]) == f"{path}:14 (element 2): 'messages' must be a non-empty list"
    # a single object is one row; a .json file holding JSON Lines is read as lines
    (tmp_path / "one.json").write_text(json.dumps(GOOD))
    assert load_rows([str(tmp_path / "one.json")]).summary()["valid"] == 1
    (tmp_path / "lines.json").write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    assert [loc for loc, _, _ in iter_rows(tmp_path / "lines.json")] == ["line 1", "line 2"]


def test_broken_json_file_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n {"messages": []},\n {oops}\n]')
    with pytest.raises(ValueError, match=r"broken.json:3: invalid JSON"):
        list(iter_rows(path))
    path.write_bytes(b'[\n {"a": "\xff"}\n]')
    with pytest.raises(ValueError, match=r"broken.json:2: not UTF-8 \(byte 0xff\)"):
        list(iter_rows(path))


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_all_rows_bad_fails_sft_naming_the_file_and_first_reason(tmp_path, dry_run):
    import yaml

    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "x"}\n{broken\n')
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        yaml.safe_dump({"data": {"train": str(train)}, "train": {"steps": 1}, "out": str(tmp_path / "runs")})
    )
    res = CliRunner().invoke(app, ["sft", str(cfg), *dry_run])
    assert res.exit_code == 2
    assert f"{train}: no valid rows (2 of 2 quarantined; first: {train}:1: unknown row format" in " ".join(
        res.stderr.split()
    )
