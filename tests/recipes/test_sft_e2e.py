"""`temper sft` end to end: a tiny model learns, bad rows are quarantined, runs are recorded."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tempering.runs.registry import Registry
from tests.conftest import SEED_SAMPLE, tiny_llama

ROOT = Path(__file__).resolve().parents[2]


def write_jsonl(path, rows, extra_lines=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(line + "\n" for line in extra_lines))
    return str(path)


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


def sft_config(tmp_path, model, **data_extra):
    train = write_jsonl(
        tmp_path / "train.jsonl",
        arithmetic_conversations(64, 1) + [SEED_SAMPLE],
        extra_lines=['{"messages": [{"role": "user", "content": "no answer"}]}', "{broken"],
    )
    heldout = write_jsonl(tmp_path / "eval.jsonl", arithmetic_conversations(16, 1, "heldout"))
    cfg = {
        "model": model,
        "lora": None,
        "data": {"train": train, "eval": heldout, "max_length": 160, **data_extra},
        "train": {
            "steps": 12,
            "batch_size": 8,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "checkpoint": {"every": 6},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result


def summary_of(result):
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads(result.stdout[result.stdout.index("{") :])


def test_sft_cli_learns_quarantines_and_records(tmp_path, tiny_dir):
    cfg = sft_config(tmp_path, tiny_dir)
    s = summary_of(run("sft", cfg, "--name", "e2e"))
    assert s["eval_loss_after"] < s["eval_loss_before"] - 0.5
    assert s["data"] == {"rows": 67, "valid": 65, "tool_call_style": "tempering", "eval_rows": 16, "quarantined": 2}
    q = [json.loads(line) for line in (tmp_path / "runs" / "e2e" / "quarantine.jsonl").read_text().splitlines()]
    assert [r["location"] for r in q] == ["line 66", "line 67"]
    assert "no assistant turn" in q[0]["reason"] and "invalid JSON" in q[1]["reason"]
    row = Registry(tmp_path / "runs" / "registry.sqlite").get("e2e")
    assert row["status"] == "finished" and set(row["inputs"]) == {
        str(tmp_path / "train.jsonl"),
        str(tmp_path / "eval.jsonl"),
    }
    assert (Path(s["final"]) / "model.safetensors").is_file()
    # same name again: resumes from the final checkpoint instead of starting over
    again = summary_of(run("sft", cfg, "--name", "e2e", "--steps", "14"))
    assert Registry(tmp_path / "runs" / "registry.sqlite").get("e2e")["metrics"]["resumed_from"] == 12
    assert again["resumed_from"] == 12 and again["steps"] == 14


def test_sft_cli_lora_with_replay_then_export(tmp_path, tiny_dir):
    general = write_jsonl(tmp_path / "general.jsonl", [SEED_SAMPLE] * 5)
    cfg = sft_config(tmp_path, tiny_dir, replay={"data": general, "ratio": 0.2})
    s = summary_of(run("sft", cfg, "--name", "lora", "--set", "lora={r: 4, alpha: 8}", "--steps", "4"))
    assert s["data"]["replay_used"] == 16  # 65 * 0.2 / 0.8 -> 16 of 81 rows are replay
    assert (Path(s["final"]) / "adapter_config.json").is_file()
    res = run("export", s["final"], "--out", tmp_path / "merged")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "merged" / "model.safetensors").is_file()


def test_flags_are_strings_not_yaml(tmp_path, tiny_dir):
    cfg = sft_config(tmp_path, tiny_dir)
    s = summary_of(run("sft", cfg, "--name", "2024", "--steps", "1"))
    assert s["run_dir"].endswith("/2024")


def test_unknown_config_keys_are_errors(tmp_path, tiny_dir):
    cfg = sft_config(tmp_path, tiny_dir)
    res = run("sft", cfg, "--set", "train.stepz=3")
    assert res.exit_code == 2 and "train.stepz: Extra inputs are not permitted" in res.stderr


@pytest.mark.slow
def test_demo_config_on_the_real_default_model(tmp_path):
    """A few LoRA steps of the demo config on SmolLM2-135M: held-out loss falls."""
    heldout = write_jsonl(tmp_path / "eval.jsonl", arithmetic_conversations(8, 0, "heldout"))
    s = summary_of(
        run(
            "sft",
            ROOT / "examples" / "sft_demo.yaml",
            "--out",
            tmp_path / "runs",
            "--name",
            "real",
            "--steps",
            "4",
            "--set",
            f"data.eval={heldout}",
            "--set",
            "train.batch_size=4",
            "--set",
            f"data.train={ROOT / 'examples/data/arith_train.jsonl'}",
        )
    )
    assert s["eval_loss_after"] < s["eval_loss_before"]
    assert s["data"]["tool_call_style"] == "tempering" and s["data"]["quarantined"] == 0


def test_sigkill_mid_run_then_resume_is_bit_identical(tmp_path, tiny_dir):
    """A real `kill -9` of `temper sft`, then the same command again, equals an unbroken run
    (at one thread count: `auto` in a fresh process and in this one may pick different counts,
    and float sums in another order are not bit-identical)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from safetensors.torch import load_file

    cfg = sft_config(tmp_path, tiny_dir)
    args = ["--set", "train.steps=40", "--set", "train.checkpoint.every=4", "--set", "data.eval=[]"]
    args += ["--set", "train.threads=1"]
    summary_of(run("sft", cfg, "--name", "straight", *args))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tempering.cli", "sft", str(cfg), "--name", "killed", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = tmp_path / "runs" / "killed" / "checkpoints" / "step-00000008"
    deadline = time.time() + 300
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # really killed mid-run, not finished
    resumed = summary_of(run("sft", cfg, "--name", "killed", *args))
    assert resumed["resumed_from"] is not None and 8 <= resumed["resumed_from"] < 40
    a = load_file(tmp_path / "runs" / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "runs" / "killed" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
