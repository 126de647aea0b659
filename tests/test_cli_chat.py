"""`temper chat`: one-shot and interactive replies from a tiny model saved to disk."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.cli.chat import ChatSession, make_engine
from tempering.rollout.engine import SamplingParams
from tests.conftest import tiny_llama

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    """A random 2-layer Llama with the default model's tokenizer and chat template, saved as an HF dir."""
    path = tmp_path_factory.mktemp("tiny-chat")
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.config.pad_token_id = smol_tokenizer.pad_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def test_one_shot_prompt_prints_the_reply(tiny_dir):
    args = ["chat", str(tiny_dir), "--prompt", "What is 2+2?", "--max-tokens", "6", "--seed", "1"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout.strip()
    again = CliRunner().invoke(app, args)
    assert again.stdout == first.stdout  # same seed, same reply
    greedy = CliRunner().invoke(app, args[:-2] + ["--temperature", "0"])
    assert greedy.exit_code == 0 and greedy.stdout.strip()


def test_interactive_multi_turn_reset_and_exit(tiny_dir):
    stdin = "hello\nand again\n/reset\n/what\nafter reset\n/exit\nnever read\n"
    res = CliRunner().invoke(app, ["chat", str(tiny_dir), "--max-tokens", "4", "--seed", "0"], input=stdin)
    assert res.exit_code == 0, res.output
    assert res.stdout.count("model>") == 3  # three turns answered, nothing after /exit
    assert "conversation reset" in res.stderr and "unknown command '/what'" in res.stderr


def test_session_keeps_history_until_reset(tiny_dir):
    session = ChatSession(
        make_engine(str(tiny_dir), "fp32"), SamplingParams(max_new_tokens=3, seed=0), system="Be brief."
    )
    session.say("one")
    session.say("two")
    assert [m["role"] for m in session.messages] == ["system", "user", "assistant", "user", "assistant"]
    session.reset()
    assert session.messages == [{"role": "system", "content": "Be brief."}]


def test_unknown_model_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = CliRunner().invoke(app, ["chat", "no-such-model", "--prompt", "hi"])
    assert res.exit_code == 2 and "unknown model" in res.stderr and "Traceback" not in res.output


def test_stderr_is_quiet_unless_verbose(tiny_dir):
    """No weight-loading bars or library warnings on stderr by default; --verbose brings them back."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    cmd = [sys.executable, "-m", "tempering.cli", "chat", str(tiny_dir), "--prompt", "hi", "--max-tokens", "2"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.strip() == "", quiet.stderr
    loud = subprocess.run(cmd[:3] + ["--verbose"] + cmd[3:], capture_output=True, text=True, env=env, timeout=300)
    assert loud.returncode == 0 and "Loading weights" in loud.stderr


def test_chat_with_a_speculative_engine_gives_the_targets_greedy_reply(tiny_dir):
    """`--set engine.kind=speculative --set engine.draft.model=DIR` (the model as its own draft):
    the same greedy reply as the default HFEngine."""
    args = ["chat", str(tiny_dir), "--prompt", "What is 2+2?", "--max-tokens", "6", "--temperature", "0"]
    plain = CliRunner().invoke(app, args + ["--precision", "fp32"])
    spec = ["--set", "engine.kind=speculative", "--set", f"engine.draft.model={tiny_dir}", "--set", "engine.draft.k=3"]
    fast = CliRunner().invoke(app, args + ["--precision", "fp32"] + spec)
    assert plain.exit_code == 0 and fast.exit_code == 0, fast.output
    assert fast.stdout == plain.stdout and plain.stdout.strip()


def test_chat_engine_key_without_its_kind_is_one_line(tiny_dir):
    res = CliRunner().invoke(app, ["chat", str(tiny_dir), "--prompt", "hi", "--set", "engine.draft.k=2"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "engine.draft applies to engine kind 'speculative' only, not 'hf'" in res.stderr


def test_make_engine_defaults_to_hfengine(tiny_dir):
    from tempering.rollout.engine import HFEngine

    assert type(make_engine(str(tiny_dir), "fp32")) is HFEngine
