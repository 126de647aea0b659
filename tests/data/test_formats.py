"""Every accepted row format becomes the conversation a user would write by hand."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tempering.data.io import load_rows
from tempering.data.render import render_with_mask

U, A = "What is 2+2?", "4"
CHAT = [{"role": "user", "content": U}, {"role": "assistant", "content": A}]


def load_one(tmp_path, row):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    result = load_rows([str(path)])
    if result.errors:
        return result.errors[0]
    return result.records[0].value.to_dicts()


@pytest.mark.parametrize(
    "row",
    [
        {"messages": CHAT},
        {"prompt": U, "completion": A},
        {"prompt": [{"role": "user", "content": U}], "completion": [{"role": "assistant", "content": A}]},
        {"conversations": [{"from": "human", "value": U}, {"from": "gpt", "value": A}], "id": "x1"},
        {"conversations": CHAT},  # OpenAI keys under the ShareGPT column name
        {"instruction": U, "output": A},
        {"instruction": U, "input": "", "output": A},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": A}]},
            ]
        },
    ],
    ids=[
        "messages",
        "prompt-completion",
        "prompt-completion-chat",
        "sharegpt",
        "sharegpt-openai-keys",
        "alpaca",
        "alpaca-empty-input",
        "content-parts",
    ],
)
def test_each_format_gives_the_same_conversation(tmp_path, row):
    assert load_one(tmp_path, row) == CHAT


def test_alpaca_system_history_and_input(tmp_path):
    row = {
        "instruction": "Translate",
        "input": "chat",
        "output": "cat",
        "system": "Be brief.",
        "history": [["hi", "hello"]],
    }
    assert load_one(tmp_path, row) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Translate\nchat"},
        {"role": "assistant", "content": "cat"},
    ]


def test_sharegpt_system_tool_calls_and_observations(tmp_path):
    row = {
        "system": "You can call tools.",
        "conversations": [
            {"from": "human", "value": "weather in Oslo?"},
            {"from": "function_call", "value": json.dumps({"name": "weather", "arguments": {"city": "Oslo"}})},
            {"from": "observation", "value": "-3C"},
            {"from": "gpt", "value": "It is -3C."},
        ],
    }
    assert load_one(tmp_path, row) == [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
        {"role": "tool", "content": "-3C"},
        {"role": "assistant", "content": "It is -3C."},
    ]


@pytest.mark.parametrize(
    "row, reason",
    [
        (
            {"prompt": U, "completion": A, "messages": CHAT},
            "ambiguous row: its keys (completion, messages, prompt) fit the messages and prompt/completion formats",
        ),
        ({"prompt": U, "response": A}, "unknown row format (keys: prompt, response)"),
        ({}, "unknown row format (keys: none)"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}, CHAT[1]]},
            "messages[0]: content part 0 has type 'input_audio'; only text parts can be trained on",
        ),
        (
            {"conversations": [{"from": "human", "value": U}, {"from": "bot", "value": A}]},
            "conversations[1]: unknown 'from' 'bot'",
        ),
        (
            {"conversations": [{"from": ["human"], "value": U}, {"from": "gpt", "value": A}]},
            "conversations[0]: unknown 'from' ['human']",
        ),
        (
            {"conversations": [{"from": "human", "value": U}, {"from": "function_call", "value": "{oops"}]},
            "conversations[1] (function_call): value is not JSON",
        ),
        ({"conversations": [{"from": "human", "value": U}]}, "ShareGPT row: no assistant turn"),
        ({"instruction": U, "output": ""}, "Alpaca row: message 1 (assistant): empty content"),
        ({"instruction": U, "output": 4}, "'output' must be a string, got int"),
        ({"prompt": 3, "completion": A}, "'prompt' must be a string or a list of messages, got int"),
    ],
)
def test_bad_rows_are_quarantined_with_file_line_and_reason(tmp_path, row, reason):
    err = load_one(tmp_path, row)
    assert str(err).startswith(f"{tmp_path / 'rows.jsonl'}:1: ")
    assert reason in err.reason, err.reason


def test_format_is_detected_per_row_and_null_columns_count_as_absent(tmp_path):
    # Arrow fills a column a row lacks with null: mixed-format Parquet must still load.
    rows = [{"messages": CHAT, "prompt": None, "completion": None}, {"messages": None, "prompt": U, "completion": A}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mixed.parquet")
    result = load_rows([str(tmp_path / "mixed.parquet")])
    assert result.summary() == {"rows": 2, "valid": 2, "quarantined": 0}
    assert [r.value.to_dicts() for r in result.records] == [CHAT, CHAT]


def test_saved_hf_datasets_load_and_pick_the_train_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    sharegpt = [{"conversations": [{"from": "human", "value": U}, {"from": "gpt", "value": A}]}] * 3
    ds = datasets.Dataset.from_list(sharegpt)
    ds.save_to_disk(str(tmp_path / "one"))
    result = load_rows([str(tmp_path / "one")])
    assert result.summary() == {"rows": 3, "valid": 3, "quarantined": 0}
    assert result.records[0].value.to_dicts() == CHAT and result.records[2].location == "row 3"

    datasets.DatasetDict({"train": ds.select([0, 1]), "test": ds.select([2])}).save_to_disk(str(tmp_path / "dict"))
    assert load_rows([str(tmp_path / "dict")]).rows == 2
    datasets.DatasetDict({"dev": ds, "test": ds}).save_to_disk(str(tmp_path / "nosplit"))
    with pytest.raises(ValueError, match=r"nosplit: dataset has no 'train' split \(splits: dev, test\)"):
        load_rows([str(tmp_path / "nosplit")])
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="plain: a directory, but not a Hugging Face dataset"):
        load_rows([str(tmp_path / "plain")])


def test_prompt_completion_trains_on_the_completion_only(tmp_path, smol_tokenizer):
    """The normalised row renders token for token like the hand-written conversation."""
    got = load_one(tmp_path, {"prompt": U, "completion": A})
    a = render_with_mask(smol_tokenizer, got, "tempering")
    b = render_with_mask(smol_tokenizer, CHAT, "tempering")
    assert (a.input_ids, a.labels) == (b.input_ids, b.labels)
    trained = smol_tokenizer.decode([t for t in a.labels if t != -100])
    assert trained.startswith(A) and U not in trained


@pytest.mark.parametrize(
    "row",
    [
        {
            "conversations": [
                {"from": "human", "value": "What is 12+5? Reply with a number."},
                {"from": "gpt", "value": "17"},
            ]
        },
        {"instruction": "What is 12+5?", "input": "Reply with a number.", "output": "17"},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is 12+5? Reply with a number."}]},
                {"role": "assistant", "content": "17"},
            ]
        },
    ],
)
def test_contamination_checks_read_every_format(row):
    """A private eval task inside ShareGPT/Alpaca/content-part rows is still found."""
    from tempering.evals.contamination import NgramIndex

    index = NgramIndex()
    index.add_tasks("private-arith", [{"id": "t1", "prompt": "What is 12+5?"}], private=True)
    assert [m.task_id for m in index.matches(row)] == ["t1"]
