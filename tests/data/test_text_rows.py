"""Plain-text rows (`data.format: text`): validation, every token trained on, long documents split,
and `temper sft` on them end to end (with the run's loss.png)."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.formats import RowInvalid
from tempering.data.io import load_rows
from tempering.data.render import IGNORE
from tempering.data.text_rows import check_text_row, render_text_records
from tempering.train.loss_plot import loss_curves
from tests.conftest import tiny_llama


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"text": ""}, "empty 'text'"),
        ({"text": 3}, "'text' must be a string, got int"),
        ({"body": "x"}, r"no 'text' field \(keys: body\)"),
        ({"messages": []}, "a chat row: remove data.format: text"),
        (["text"], "row is not a JSON object"),
    ],
)
def test_bad_text_rows_name_the_reason(row, reason):
    with pytest.raises(RowInvalid, match=reason):
        check_text_row(row)


def test_every_token_is_trained_on_and_long_documents_are_split(tmp_path, smol_tokenizer):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "one two three four five", "id": 7}) + "\n" + '{"text": 5}\n')
    loaded = load_rows([str(path)], check_text_row)
    assert [e.location for e in loaded.errors] == ["line 2"]
    ids = smol_tokenizer("one two three four five")["input_ids"] + [smol_tokenizer.eos_token_id]
    pieces = render_text_records(loaded, smol_tokenizer, max_length=4)
    assert [p.input_ids for p in pieces] == [ids[i : i + 4] for i in range(0, len(ids), 4)]
    assert all(p.labels == p.input_ids and IGNORE not in p.labels for p in pieces)
    assert sum(len(p.input_ids) for p in pieces) == len(ids)


def test_sft_on_text_rows_learns_quarantines_and_plots_the_loss(tmp_path, smol_tokenizer):
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    docs = [{"text": f"The number after {n} is {n + 1}. " * 3} for n in range(24)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(d) + "\n" for d in docs) + '{"messages": []}\n{"text": "  "}\n')
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(d) + "\n" for d in docs[:4]))
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {"train": str(train), "eval": str(held), "format": "text", "max_length": 32},
        "train": {"steps": 10, "batch_size": 8, "precision": "fp32", "optim": {"lr": 3e-3}, "eval_every": 5},
        "out": str(tmp_path / "runs"),
    }
    (tmp_path / "cpt.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(app, ["sft", str(tmp_path / "cpt.yaml"), "--name", "cpt"])
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout[result.stdout.index("{") :])
    assert s["data"]["format"] == "text" and s["data"]["valid"] == 24 and s["data"]["quarantined"] == 2
    assert s["data"]["pieces"] > 24  # each document is longer than 32 tokens: split, not quarantined
    assert s["eval_loss_after"] < s["eval_loss_before"] - 0.5
    run = tmp_path / "runs" / "cpt"
    train_curve, held_curve = loss_curves(run / "metrics.jsonl")
    assert sorted(train_curve) == list(range(1, 11)) and train_curve[10] == s["train_loss_last"]
    assert sorted(held_curve["eval_loss"]) == [5, 10]
    assert s["loss_plot"] == str(run / "loss.png") and (run / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loss_curves_keep_the_last_value_of_a_step_done_twice(tmp_path):
    rows = [
        {"step": 1, "loss": 4.0},
        {"step": 2, "loss": 9.0},
        {"event": "rollback", "to": "step-00000001"},
        {"step": 2, "loss": 3.0},
        {"event": "eval", "step": 2, "eval_loss": 3.5, "eval_reward_accuracy": 0.5},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert loss_curves(path) == ({1: 4.0, 2: 3.0}, {"eval_loss": {2: 3.5}})
