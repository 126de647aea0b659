"""`temper data agree | audit | pairs`: one JSON line last, bad rows counted and quarantined."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tempering.cli import app


def row(prompt, votes, chosen="a", rejected="b"):
    return {
        "prompt": prompt,
        "chosen": chosen,
        "rejected": rejected,
        "votes": [{"annotator": f"a{i}", "prefers": v} for i, v in enumerate(votes)],
    }


def write(path, rows, extra_lines=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(extra_lines))
    return path


def last_json(res):
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_agree_reports_filters_and_quarantines(tmp_path):
    small = [
        ("chosen", "chosen", "chosen"),
        ("chosen", "chosen", "rejected"),
        ("rejected", "rejected", "tie"),
        ("chosen", "tie", "tie"),
    ]
    data = write(
        tmp_path / "p.jsonl",
        [row(f"q{i}", v) for i, v in enumerate(small)],
        ['{"prompt": "q", "chosen": "a"}\n', "not json\n"],
    )
    kept = tmp_path / "kept.jsonl"
    res = CliRunner().invoke(
        app,
        [
            "data",
            "agree",
            str(data),
            "--min-agreement",
            "0.6",
            "--flip",
            "--weight",
            "--out",
            str(kept),
            "--quarantine",
            str(tmp_path / "q.jsonl"),
        ],
    )
    assert res.exit_code == 0, res.output
    s = last_json(res)
    assert (s["rows"], s["valid"], s["quarantined"], s["voted"], s["kept"], s["flipped"]) == (6, 4, 2, 4, 3, 1)
    assert abs(s["alpha"] - 4 / 15) < 1e-6 and abs(s["kappa"] - 0.2) < 1e-6  # the hand-computed example
    assert s["dropped"]["majority_tie"] == 1
    out = [json.loads(line) for line in kept.read_text().splitlines()]
    assert [r["prompt"] for r in out] == ["q0", "q1", "q2"] and out[2]["chosen"] == "b"
    quarantined = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert [q["location"] for q in quarantined] == ["line 5", "line 6"]
    assert "p.jsonl:5" in res.output and "missing 'rejected'" in res.output


def test_agree_bad_threshold_and_missing_file_are_one_line_errors(tmp_path):
    res = CliRunner().invoke(app, ["data", "agree", str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "none.jsonl" in res.output and "Traceback" not in res.output
    data = write(tmp_path / "p.jsonl", [row("q", ["chosen"])])
    res = CliRunner().invoke(app, ["data", "agree", str(data), "--min-agreement", "2"])
    assert res.exit_code == 2 and "min-agreement" in res.output


def test_audit_json_and_strict_exit(tmp_path):
    train = write(tmp_path / "train.jsonl", [row("What is 1+1?", [], "2", "2"), row("What is 2+2?", [], "4", "5")])
    held = write(tmp_path / "held.jsonl", [row("what is 2+2?", [], "4", "3")])
    res = CliRunner().invoke(app, ["data", "audit", str(train), "--against", str(held)])
    assert res.exit_code == 0, res.output
    s = last_json(res)
    assert s["rows"] == 2 and s["identical"] == 1 and s["across_splits"] == {str(held): 1}
    assert s["examples"]["identical"] == [f"{train}:1"]
    assert CliRunner().invoke(app, ["data", "audit", str(train), "--strict"]).exit_code == 1


def test_pairs_rejects_a_bad_config_before_loading_a_model(tmp_path):
    res = CliRunner().invoke(app, ["data", "pairs", "--out", str(tmp_path / "p.jsonl"), "--k", "1"])
    assert res.exit_code == 2 and "k" in res.output and "greater than or equal to 2" in res.output
    res = CliRunner().invoke(app, ["data", "pairs"])
    assert res.exit_code == 2 and "output" in res.output
