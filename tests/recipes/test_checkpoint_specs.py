"""Checkpoints as model specs, `--resume-from`, epochs, eval during training, the best model,
early stopping and the chat-template override, through `temper sft` on a tiny model."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tempering.models.load import ModelNotFound, load_model, load_tokenizer, resolve_model
from tests.conftest import tiny_llama

TEMPLATE = "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


def write_config(tmp_path, model, lora=True, **train):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(20, 1)))
    held = tmp_path / "eval.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(8, 1, "heldout")))
    cfg = {
        "model": model,
        "lora": {"r": 4, "alpha": 8} if lora else None,
        "data": {"train": str(data), "eval": str(held), "max_length": 160},
        "train": {
            "steps": 6,
            "batch_size": 4,
            "precision": "fp32",
            "optim": {"lr": 3e-3},
            "checkpoint": {"every": 3, "keep_last": 5},
            **train,
        },
        "out": str(tmp_path / "runs"),
    }
    if cfg["train"].get("epochs"):
        del cfg["train"]["steps"]
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def sft(*args):
    result = CliRunner().invoke(app, ["sft", *map(str, args)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads(result.stdout[result.stdout.index("{") :])


def logits(spec: str) -> torch.Tensor:
    model = load_model(spec).eval()
    with torch.no_grad():
        return model(torch.tensor([[5, 17, 300, 42, 9]])).logits


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_every_checkpoint_is_a_model_spec(tmp_path, tiny_dir, lora):
    sft(write_config(tmp_path, tiny_dir, lora=lora), "--name", "run")
    run = tmp_path / "runs" / "run"
    final = logits(str(run / "final"))
    # the last checkpoint and final/ hold the same weights: the spec rebuilds the model exactly
    torch.testing.assert_close(logits(f"{run}@step-6"), final, rtol=0, atol=0)
    torch.testing.assert_close(logits(f"{run}@latest"), final, rtol=0, atol=0)
    # step 3 is a different model, addressed by its padded dir, its unpadded name or RUN@step-3
    mid = logits(f"{run}@step-3")
    assert not torch.equal(mid, final)
    torch.testing.assert_close(logits(str(run / "checkpoints" / "step-3")), mid, rtol=0, atol=0)
    torch.testing.assert_close(logits(str(run / "checkpoints" / "step-00000003")), mid, rtol=0, atol=0)
    assert json.loads((Path(resolve_model(f"{run}@step-3")) / "tempering-run.json").read_text())["run"] == "run"
    with pytest.raises(ModelNotFound, match=r"no checkpoint at step 4 .*steps kept: 0, 3, 6"):
        resolve_model(f"{run}@step-4")
    if lora:  # a LoRA checkpoint exports as a merged model
        result = CliRunner().invoke(app, ["export", f"{run}@step-3", "--out", str(tmp_path / "merged")])
        assert result.exit_code == 0, result.output
        torch.testing.assert_close(logits(str(tmp_path / "merged")), mid, rtol=1e-5, atol=1e-5)


def test_resume_from_a_checkpoint_continues_exactly_or_rewinds_its_own_run(tmp_path, tiny_dir):
    cfg = write_config(tmp_path, tiny_dir)
    sft(cfg, "--name", "a")
    a = tmp_path / "runs" / "a"
    b = sft(cfg, "--name", "b", "--resume-from", f"{a}@step-3")
    assert b["resumed_from"] == 3 and b["steps"] == 6
    torch.testing.assert_close(logits(str(tmp_path / "runs" / "b" / "final")), logits(str(a / "final")))
    consumed = [json.loads(x)["ids"] for x in (tmp_path / "runs" / "b" / "consumed.jsonl").read_text().splitlines()]
    assert consumed == [json.loads(x)["ids"] for x in (a / "consumed.jsonl").read_text().splitlines()]
    # inside its own run: rewinds to step 3, and the newer checkpoint is set aside
    again = sft(cfg, "--name", "a", "--resume-from", str(a / "checkpoints" / "step-00000003"), "--steps", "8")
    assert again["resumed_from"] == 3 and again["steps"] == 8
    assert (a / "checkpoints" / "rewound-step-00000006").is_dir()


def test_epochs_derive_the_steps(tmp_path, tiny_dir):
    # 20 rows, batch 4, 1.5 epochs: ceil(1.5 * 20 / 4) = 8 steps
    summary = sft(write_config(tmp_path, tiny_dir, epochs=1.5), "--name", "ep")
    assert summary["steps"] == 8 and summary["target_steps"] == 8


def test_steps_and_epochs_together_are_one_line_error(tmp_path, tiny_dir):
    result = CliRunner().invoke(app, ["sft", str(write_config(tmp_path, tiny_dir, epochs=1)), "--steps", "5"])
    assert result.exit_code != 0
    assert "set exactly one of train.steps and train.epochs" in result.output
    assert "Traceback" not in result.output


def test_eval_every_keeps_the_best_model_trained_with_the_chat_template(tmp_path, tiny_dir):
    cfg_path = write_config(tmp_path, tiny_dir, eval_every=2, keep_best="eval_loss")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["chat_template"] = "t.jinja"  # relative: resolved against the config file's folder
    cfg_path.write_text(yaml.safe_dump(cfg))
    summary = sft(cfg_path, "--name", "best")
    run = tmp_path / "runs" / "best"
    evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    assert [e["step"] for e in evals] == [2, 4, 6]
    best = min(evals, key=lambda e: e["eval_loss"])
    assert summary["best"] == {"step": best["step"], "value": best["eval_loss"]}
    assert (run / "best" / "adapter_config.json").is_file()
    assert resolve_model(f"{run}@best") == str(run / "best")
    # the template: trained with, saved with final/, best/ and the checkpoints, recorded in the config
    for spec in (summary["final"], f"{run}@best", f"{run}@step-3"):
        assert load_tokenizer(spec).chat_template == TEMPLATE, spec
    conv = [{"role": "user", "content": "hi"}]
    assert load_tokenizer(summary["final"]).apply_chat_template(conv, tokenize=False) == "<<user>>hi\n"
    assert json.loads((run / "run_config.json").read_text())["chat_template"] == str(tmp_path / "t.jinja")


def test_early_stopping_stops_and_the_run_counts_as_finished(tmp_path, tiny_dir):
    # lr 1e-12: the held-out loss cannot improve by 0.1, so evaluations 2 and 3 are stale -> stop at step 6
    early = {"metric": "eval_loss", "patience": 2, "min_delta": 0.1}
    cfg = write_config(tmp_path, tiny_dir, steps=20, eval_every=2, early_stopping=early, optim={"lr": 1e-12})
    summary = sft(cfg, "--name", "early")
    assert summary["steps"] == 6 and summary["stopped_early"].startswith("early stopping: eval_loss")
    assert sft(cfg, "--name", "early")["steps"] == 6  # not resumed: finished


def test_keep_best_without_eval_every_is_refused(tmp_path, tiny_dir):
    result = CliRunner().invoke(app, ["sft", str(write_config(tmp_path, tiny_dir, keep_best="eval_loss"))])
    assert result.exit_code != 0 and "train.keep_best needs train.eval_every" in result.output


def test_a_broken_chat_template_is_one_line_error(tmp_path, tiny_dir):
    result = CliRunner().invoke(
        app, ["sft", str(write_config(tmp_path, tiny_dir)), "--set", 'chat_template="{% for x"']
    )
    assert result.exit_code != 0 and "not a valid Jinja template" in result.output
    assert "Traceback" not in result.output
