"""`temper sft --dry-run`: the run's own data path, counted and shown, and nothing trained."""

import io
import json

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import SFTConfig, load_config
from tempering.data.preview import preview_sft, render_preview
from tempering.data.render import IGNORE, render_with_mask
from tempering.recipes.sft import prepare_sft_data

ROWS = [
    {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]},
    {"prompt": "Name a colour.", "completion": "Blue."},
    {"conversations": [{"from": "human", "value": "Say hi"}, {"from": "gpt", "value": "hi"}]},
]
CHATS = [
    ROWS[0]["messages"],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
    [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}],
]


@pytest.fixture()
def cfg_path(tmp_path):
    lines = [json.dumps(r) for r in ROWS] + ['{"text": "no format"}']
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    path = tmp_path / "sft.yaml"
    path.write_text(
        yaml.safe_dump(
            {"data": {"train": "train.jsonl", "max_length": 256}, "train": {"steps": 5}, "out": str(tmp_path / "runs")}
        )
    )
    return path


def preview(path, tokenizer):
    cfg = load_config(SFTConfig, path)
    return preview_sft(cfg, prepare_sft_data(cfg.data, tokenizer, cfg.train.seed), tokenizer)


def test_preview_counts_what_training_would_see(cfg_path, smol_tokenizer):
    p = preview(cfg_path, smol_tokenizer)
    assert (p["data"]["rows"], p["data"]["valid"], p["data"]["quarantined"]) == (4, 3, 1)
    assert p["errors"] == [
        f"{cfg_path.parent / 'train.jsonl'}:4: unknown row format (keys: text); expected "
        "'messages', 'prompt' + 'completion', 'conversations' (ShareGPT) or "
        "'instruction' + 'output' (Alpaca)"
    ]
    rendered = [render_with_mask(smol_tokenizer, c, "tempering") for c in CHATS]
    lengths = [len(r.input_ids) for r in rendered]
    assert p["tokens"] == {
        "total": sum(lengths),
        "loss": sum(r.n_loss_tokens for r in rendered),
        "mean_length": round(sum(lengths) / 3, 1),
        "max_length": max(lengths),
    }
    assert p["config"]["data"]["train"] == [str(cfg_path.parent / "train.jsonl")]
    # the example: all of the first row's text, cut where the mask switches
    first = rendered[0]
    spans = p["example"]
    assert "".join(s["text"] for s in spans) == smol_tokenizer.decode(first.input_ids)
    assert "".join(s["text"] for s in spans if s["trained"]) == smol_tokenizer.decode(
        [t for t in first.labels if t != IGNORE]
    )
    assert [s["trained"] for s in spans] == [False, True, False]  # prompt, "4<|im_end|>", trailing glue


def test_dry_run_prints_marked_example_and_creates_no_run(cfg_path, tmp_path):
    res = CliRunner().invoke(app, ["sft", str(cfg_path), "--dry-run", "--set", "train.batch_size=2"])
    assert res.exit_code == 0, res.output
    assert "# resolved config" in res.stdout and "batch_size: 2" in res.stdout
    assert "rows 4, valid 3, quarantined 1" in res.stdout
    assert "train.jsonl:4: unknown row format" in res.stdout
    assert "<|im_start|>assistant\n\u27e64<|im_end|>\u27e7" in res.stdout
    summary = json.loads(res.stdout[res.stdout.rindex("\n{") :])
    assert summary["dry_run"] is True and summary["valid"] == 3
    assert not (tmp_path / "runs").exists()  # no run dir, no registry


def test_terminal_output_styles_instead_of_marking(cfg_path, smol_tokenizer):
    p = preview(cfg_path, smol_tokenizer)
    buf = io.StringIO()
    render_preview(p, Console(file=buf, force_terminal=True, color_system="standard", width=60))
    text = buf.getvalue()
    assert "\u27e6" not in text and "\x1b[" in text
    assert "\x1b[1;30;42m4<|im_end|>" in text  # trained tokens: bold black on green


def test_dry_run_refuses_what_the_run_would_refuse(tmp_path):
    (tmp_path / "train.jsonl").write_text("\n")
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({"data": {"train": "train.jsonl"}, "train": {"steps": 1}}))
    res = CliRunner().invoke(app, ["sft", str(path), "--dry-run"])
    assert res.exit_code == 2 and f"{tmp_path / 'train.jsonl'}: no rows" in " ".join(res.stderr.split())
