"""`temper data dedup` and `temper data decontam`: counts as one JSON line, kept rows written
atomically with a checksum, bad rows quarantined, the pass recorded in the run registry."""

import hashlib
import json

from typer.testing import CliRunner

from tempering.cli import app
from tempering.runs.registry import Registry
from tests.evals.conftest import recall_tasks, sft_row, write_jsonl, write_suite

runner = CliRunner()
BASE = (
    "The committee met on a rainy Tuesday to review the budget for the new library wing and agreed "
    "to postpone the vote until the architects had finished their revised drawings of the entrance."
)


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_dedup_writes_kept_rows_report_checksum_quarantine_and_registry(tmp_path):
    near = BASE.replace("entrance", "doorway")  # last of 33 words: 28 of 29 shingles shared, Jaccard 28/30
    rows = [
        {"id": "a", "text": BASE},
        {"id": "b", "text": BASE.upper()},
        {"id": "c", "text": near},
        {"id": "d", "text": "A different row entirely, about baking bread with rye flour."},
    ]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    data.write_text(data.read_text() + "{broken\n")
    out = tmp_path / "out" / "kept.jsonl"
    result = run("data", "dedup", data, "-o", out, "--root", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {
        k: summary[k] for k in ("rows", "kept", "exact_duplicates", "near_duplicates", "clusters", "quarantined")
    } == {"rows": 5, "kept": 2, "exact_duplicates": 1, "near_duplicates": 1, "clusters": 1, "quarantined": 1}
    assert [r["id"] for r in map(json.loads, out.read_text().splitlines())] == ["a", "d"]
    assert summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert (out.parent / "kept.jsonl.sha256").read_text().split()[0] == summary["sha256"]
    report = json.loads((out.parent / "kept.dedup.json").read_text())
    (cluster,) = report["clusters"]
    assert cluster["keeper"] == "a" and [(m["row"], m["kind"]) for m in cluster["members"]] == [
        ("b", "exact"),
        ("c", "near"),
    ]
    (bad,) = map(json.loads, (out.parent / "kept.jsonl.quarantine.jsonl").read_text().splitlines())
    assert (bad["location"], bad["reason"][:12], bad["raw"]) == ("line 5", "invalid JSON", "{broken")
    with Registry(tmp_path / "runs" / "registry.sqlite") as registry:
        record = registry.get(summary["run_id"])
        inputs = registry.inputs(summary["run_id"])
    assert record["kind"] == "dedup" and record["status"] == "finished"
    assert [(i.role, i.sha256) for i in inputs] == [("train", hashlib.sha256(data.read_bytes()).hexdigest())]


def test_dedup_refuses_bad_options_and_missing_files_in_one_line(tmp_path):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": BASE}])
    bad = run("data", "dedup", data, "-o", tmp_path / "o.jsonl", "--threshold", "1.5", "--root", "")
    assert bad.exit_code == 2 and "threshold" in bad.output and len(bad.output.strip().splitlines()) == 1
    missing = run("data", "dedup", tmp_path / "none.jsonl", "-o", tmp_path / "o.jsonl", "--root", "")
    assert missing.exit_code == 2 and "data file not found" in missing.output
    assert not (tmp_path / "o.jsonl").exists()


def test_decontam_with_settings_report_and_registry(tmp_path):
    rows = recall_tasks(6, seed=1)
    public = write_suite(tmp_path, "pub", write_jsonl(tmp_path / "pub.jsonl", rows[:3]))
    private = write_suite(tmp_path, "priv", write_jsonl(tmp_path / "priv.jsonl", rows[3:]), private=True)
    clean = recall_tasks(5, seed=2, exclude={r["prompt"] for r in rows})
    data = write_jsonl(
        tmp_path / "train.jsonl",
        [sft_row(r["prompt"], "x", id=f"row-{i}") for i, r in enumerate(clean)]
        + [
            sft_row(rows[0]["prompt"].upper(), "x", id="leak-pub"),
            sft_row("see: " + rows[4]["prompt"], "x", id="leak-priv"),
        ],
    )
    scan = run("data", "decontam", data, "--against", f"{public},{private}")
    assert scan.exit_code == 1
    summary = json.loads(scan.stdout.strip().splitlines()[-1])
    assert (summary["matched_rows"], summary["scanned"], summary["by_suite"]) == (2, 7, {"pub": 1, "priv": 1})
    assert rows[4]["prompt"] not in scan.output and rows[4]["id"] not in scan.output
    out = tmp_path / "clean.jsonl"
    removed = run(
        "data",
        "decontam",
        data,
        "--against",
        public,
        "--against",
        private,
        "-o",
        out,
        "--root",
        tmp_path / "runs",
        "--n",
        "8",
    )
    assert removed.exit_code == 0, removed.output
    summary = json.loads(removed.stdout.strip().splitlines()[-1])
    assert summary["kept"] == 5 and summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    report = json.loads((tmp_path / "clean.decontam.json").read_text())
    assert report["settings"] == {"n": 8, "min_coverage": 0.5, "boilerplate_tasks": 3}
    assert rows[4]["prompt"] not in json.dumps(report)
    with Registry(tmp_path / "runs" / "registry.sqlite") as registry:
        assert registry.get(summary["run_id"])["kind"] == "decontam"


def test_empty_runs_records_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": BASE}, {"text": BASE}])
    result = run("data", "dedup", data, "-o", tmp_path / "o.jsonl", "--root", "")
    assert result.exit_code == 0 and json.loads(result.stdout.strip().splitlines()[-1])["run_id"] is None
    assert not list(tmp_path.rglob("registry.sqlite"))
