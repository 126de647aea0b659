"""Malformed rows are quarantined and counted, with file:line (or row) and reason."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.io import load_rows, write_quarantine
from tests.conftest import SEED_SAMPLE

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
BAD_LINES = [
    ("{not json", "invalid JSON"),
    (
        json.dumps({"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]}),
        "unknown role 'wizard'",
    ),
    (json.dumps({"messages": [{"role": "user"}, {"role": "assistant", "content": "y"}]}), "missing content"),
    (json.dumps({"messages": [{"role": "user", "content": "only a question"}]}), "no assistant turn"),
    (json.dumps({"text": "no messages"}), "unknown row format (keys: text)"),
    (json.dumps([1, 2]), "not a JSON object"),
    (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a", "tool_calls": [{"arguments": {}}]},
                ]
            }
        ),
        "tool_calls[0] needs a non-empty string 'name'",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "a"}]}),
        "content must be a string",
    ),
]


def write_mixed(path):
    lines = [json.dumps(GOOD), json.dumps(SEED_SAMPLE)] + [line for line, _ in BAD_LINES] + ["", json.dumps(GOOD)]
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_bad_jsonl_rows_are_named_by_file_line_and_reason(tmp_path):
    path = tmp_path / "mixed.jsonl"
    write_mixed(path)
    result = load_rows([str(path)])
    assert result.summary() == {"rows": 11, "valid": 3, "quarantined": 8}
    for err, (line_no, (_, reason)) in zip(result.errors, enumerate(BAD_LINES, start=3)):
        assert str(err).startswith(f"{path}:{line_no}: ")
        assert reason in err.reason
    q = write_quarantine(result.errors, tmp_path / "run" / "quarantine.jsonl")
    rows = [json.loads(line) for line in q.read_text().splitlines()]
    assert [r["location"] for r in rows] == [f"line {i}" for i in range(3, 11)]
    assert rows[0]["raw"] == "{not json"


def test_parquet_rows_are_numbered(tmp_path):
    bad = {"messages": [{"role": "user", "content": "q", "tool_calls": None}]}
    table = pa.Table.from_pylist([GOOD, bad, GOOD])
    pq.write_table(table, tmp_path / "d.parquet")
    result = load_rows([str(tmp_path / "d.parquet")])
    assert result.summary() == {"rows": 3, "valid": 2, "quarantined": 1}
    assert str(result.errors[0]) == f"{tmp_path / 'd.parquet'}: row 2: no assistant turn (nothing to learn from)"


def test_data_validate_cli_reports_and_exits_nonzero(tmp_path):
    path = tmp_path / "mixed.jsonl"
    write_mixed(path)
    long_row = {"messages": [{"role": "user", "content": "word " * 300}, {"role": "assistant", "content": "ok"}]}
    with path.open("a") as fh:
        fh.write(json.dumps(long_row) + "\n")
    res = CliRunner().invoke(
        app, ["data", "validate", str(path), "--max-length", "256", "--quarantine", str(tmp_path / "q.jsonl")]
    )
    assert res.exit_code == 1
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert last == {"rows": 12, "valid": 3, "quarantined": 9}
    assert "over max length" in res.stderr and f"{path}:13:" in res.stderr
    assert len((tmp_path / "q.jsonl").read_text().splitlines()) == 9


def test_data_validate_clean_file_exits_zero(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(SEED_SAMPLE) + "\n")
    res = CliRunner().invoke(app, ["data", "validate", str(path)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"rows": 2, "valid": 2, "quarantined": 0}


def test_more_bad_shapes_are_quarantined_not_crashes(tmp_path):
    rows = [
        {"messages": [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "q", "name": 5}, {"role": "assistant", "content": "a"}]},
        # accepted: string arguments, OpenAI ids, the function wrapper
        {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"d": "/"}'}},
                        {"id": "c2", "name": "cat", "arguments": '{"f": "x"}'},
                    ],
                },
            ]
        },
    ]
    path = tmp_path / "rows.json"  # a JSON array file
    path.write_text(json.dumps(rows, indent=2))
    result = load_rows([str(path)])
    assert result.summary() == {"rows": 3, "valid": 1, "quarantined": 2}
    assert "first non-system turn is the assistant's" in result.errors[0].reason
    assert str(result.errors[1]).startswith(f"{path}:{result.errors[1].location.split()[-1][:-1]} (element 2): ")
    assert result.errors[1].location.startswith("element 2 (line ") and "messages.0.name" in result.errors[1].reason
    calls = result.records[0].value.messages[1].tool_calls
    assert [(c.name, c.arguments) for c in calls] == [("ls", {"d": "/"}), ("cat", {"f": "x"})]


def test_turn_weights_load_and_bad_ones_are_quarantined(tmp_path):
    def row(*turns):
        return json.dumps({"messages": [{"role": "user", "content": "q"}, *turns]})

    path = tmp_path / "rows.jsonl"
    path.write_text(
        "\n".join(
            [
                row(
                    {"role": "assistant", "content": "x", "weight": 0},
                    {"role": "user", "content": "no"},
                    {"role": "assistant", "content": "y"},
                ),
                row({"role": "assistant", "content": "x", "weight": 0.5}),
                row({"role": "assistant", "content": "x", "weight": True}),
                row({"role": "assistant", "content": "x", "weight": 0}),
                json.dumps(
                    {"messages": [{"role": "user", "content": "q", "weight": 1}, {"role": "assistant", "content": "a"}]}
                ),
            ]
        )
    )
    result = load_rows([str(path)])
    assert result.summary() == {"rows": 5, "valid": 1, "quarantined": 4}
    assert [m.weight for m in result.records[0].value.messages] == [None, 0, None, None]
    assert [str(e) for e in result.errors] == [
        f"{path}:2: message 1: weight must be 0 or 1, got 0.5",
        f"{path}:3: message 1: weight must be 0 or 1, got True",
        f"{path}:4: every assistant turn has weight 0 (nothing to learn from)",
        f"{path}:5: message 0 (user): only assistant turns have a weight",
    ]


def test_json_array_rows_are_placed_by_element_and_the_line_they_start_on(tmp_path):
    path = tmp_path / "rows.json"
    bad = {"messages": [{"role": "user", "content": "only a question"}]}
    path.write_text(json.dumps([GOOD, bad, GOOD, bad], indent=2))  # pretty-printed: GOOD spans 12 lines, bad 8
    result = load_rows([str(path)])
    assert [e.location for e in result.errors] == ["element 2 (line 14)", "element 4 (line 34)"]
    assert str(result.errors[0]) == f"{path}:14 (element 2): no assistant turn (nothing to learn from)"
    assert path.read_text().splitlines()[13].strip() == "{"  # line 14 is where element 2 opens
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps([GOOD, bad]))
    assert str(load_rows([str(compact)]).errors[0]).startswith(f"{compact}:1 (element 2): ")
    table = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD, {"messages": bad["messages"]}]), table)
    assert str(load_rows([str(table)]).errors[0]).startswith(f"{table}: row 2: ")
