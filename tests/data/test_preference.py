"""Preference rows: the contract's forms load; bad rows are quarantined with file:line: reason."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tempering.data.formats import RowInvalid
from tempering.data.io import NoRows, write_quarantine
from tempering.data.preference import PreferencePair, check_pair, load_pairs

SIMPLE = {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5"}
CONV = {
    "prompt": [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "List files."},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]},
        {"role": "tool", "content": "a.py b.py"},
    ],
    "chosen": [{"role": "assistant", "content": "Two files: a.py and b.py."}],
    "rejected": [
        {
            "role": "assistant",
            "content": "Let me check again.",
            "tool_calls": [{"type": "function", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}],
        },
        {"role": "tool", "content": "a.py b.py"},
        {"role": "assistant", "content": "a.py"},
    ],
    "votes": [{"annotator": "a1", "prefers": "chosen"}, {"annotator": "a2", "prefers": "tie"}],
    "source": "human",
    "weight": 0.5,
    "meta": {"id": 7},
}

BAD = [
    ({"prompt": "q", "chosen": "a"}, "missing 'rejected'"),
    ({"messages": [{"role": "user", "content": "q"}]}, "not a preference pair: missing 'prompt', 'chosen', 'rejected'"),
    ({**SIMPLE, "score": 3}, "unknown field(s) ['score']; put provenance under 'meta'"),
    ({**SIMPLE, "chosen": 4}, "'chosen' must be a string or a list of messages"),
    ({**SIMPLE, "rejected": "  "}, "'rejected' is empty"),
    (
        {**SIMPLE, "prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        "'prompt' must end before the answer",
    ),
    ({**SIMPLE, "prompt": [{"role": "system", "content": "s"}]}, "'prompt' has no user turn"),
    (
        {**SIMPLE, "chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "4"}]},
        "'chosen' must start with an assistant turn",
    ),
    (
        {
            **SIMPLE,
            "chosen": [
                {"role": "assistant", "content": "x", "tool_calls": [{"name": "f"}]},
                {"role": "tool", "content": "r"},
            ],
        },
        "'chosen' must end with an assistant turn",
    ),
    (
        {
            **SIMPLE,
            "rejected": [
                {"role": "assistant", "content": "x", "tool_calls": [{"arguments": {}}]},
                {"role": "tool", "content": "r"},
                {"role": "assistant", "content": "y"},
            ],
        },
        "rejected.0.tool_calls.0.name: Field required",
    ),
    ({**SIMPLE, "votes": [{"annotator": "a1", "prefers": "left"}]}, "votes.0.prefers"),
    (
        {**SIMPLE, "votes": [{"annotator": "a1", "prefers": "chosen"}, {"annotator": "a1", "prefers": "tie"}]},
        "annotator 'a1' voted more than once",
    ),
    ({**SIMPLE, "source": "crowd"}, "source:"),
    ({**SIMPLE, "weight": -1}, "weight: Input should be greater than or equal to 0"),
    ({**SIMPLE, "weight": float("nan")}, "weight"),
    (
        {**SIMPLE, "prompt": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
        "only text parts can be trained on",
    ),
]


def test_string_and_conversation_rows_load_and_round_trip():
    simple = check_pair(SIMPLE)
    assert simple.prompt_messages() == [{"role": "user", "content": "What is 2+2?"}]
    assert simple.completion_messages("rejected") == [{"role": "assistant", "content": "5"}]
    assert simple.weight == 1.0 and simple.votes is None
    assert simple.to_row() == {**SIMPLE, "weight": 1.0}

    conv = check_pair(CONV)
    full = conv.conversation("rejected")
    assert [m["role"] for m in full] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    # OpenAI function shape normalised to ours
    assert full[4]["tool_calls"] == [{"name": "shell", "arguments": {"cmd": "ls"}}]
    assert [v.prefers for v in conv.votes] == ["chosen", "tie"]
    assert PreferencePair.model_validate(conv.to_row()) == conv


def test_content_parts_are_joined():
    row = {
        **SIMPLE,
        "prompt": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    }
    assert check_pair(row).prompt_messages() == [{"role": "user", "content": "ab"}]


@pytest.mark.parametrize("row,reason", BAD)
def test_bad_rows_name_the_reason(row, reason):
    with pytest.raises(RowInvalid) as exc:
        check_pair(row)
    assert reason in str(exc.value)


def test_load_pairs_quarantines_with_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    lines = [json.dumps(SIMPLE), "{broken", json.dumps(CONV), "", json.dumps(BAD[0][0])]
    path.write_text("\n".join(lines) + "\n")
    result = load_pairs([path])
    assert result.summary() == {"rows": 4, "valid": 2, "quarantined": 2}
    assert [str(e).split(": ")[0] for e in result.errors] == [f"{path}:2", f"{path}:5"]
    assert "invalid JSON" in result.errors[0].reason
    assert isinstance(result.records[1].value, PreferencePair) and result.records[1].location == "line 3"
    q = write_quarantine(result.errors, tmp_path / "q.jsonl")
    assert json.loads(q.read_text().splitlines()[1])["raw"] == BAD[0][0]


def test_parquet_nulls_count_as_absent(tmp_path):
    # Arrow fills a column missing from one row with null: that row must still load
    pq.write_table(
        pa.Table.from_pylist([{**SIMPLE, "source": None}, {**SIMPLE, "source": "verifier"}]), tmp_path / "p.parquet"
    )
    result = load_pairs([tmp_path / "p.parquet"])
    assert result.summary() == {"rows": 2, "valid": 2, "quarantined": 0}
    assert [r.value.source for r in result.records] == [None, "verifier"]


def test_empty_file_is_an_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(NoRows, match="no rows"):
        load_pairs([tmp_path / "e.jsonl"])
