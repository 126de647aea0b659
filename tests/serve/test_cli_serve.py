"""`temper keys`, `temper feedback export`, `temper arena export`, `temper serve` argument errors: one line, no traceback."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from tempering.cli import app
from tempering.serve.store import Store

runner = CliRunner()


def test_keys_create_list_revoke(tmp_path):
    state = str(tmp_path / "dep")
    res = runner.invoke(app, ["keys", "create", "alice", "--state", state, "--rate-limit", "5"])
    assert res.exit_code == 0, res.output
    secret = res.output.strip().splitlines()[-1]
    store = Store(tmp_path / "dep" / "serve.sqlite")
    key = store.authenticate(secret)
    assert secret.startswith("tml-") and key is not None and key.name == "alice"
    listed = runner.invoke(app, ["keys", "ls", "--state", state]).output
    assert "alice  active  rate_limit=5" in listed and secret not in listed
    assert runner.invoke(app, ["keys", "revoke", "alice", "--state", state]).exit_code == 0
    assert store.authenticate(secret) is None
    assert "revoked" in runner.invoke(app, ["keys", "ls", "--state", state]).output


def test_errors_are_one_line(tmp_path):
    state = str(tmp_path / "dep")
    runner.invoke(app, ["keys", "create", "alice", "--state", state])
    cases = [
        (["keys", "create", "alice", "--state", state], "a key named 'alice' exists already"),
        (["keys", "revoke", "bob", "--state", state], "no key named 'bob'"),
        (
            ["feedback", "export", "--out", str(tmp_path / "f.jsonl"), "--state", str(tmp_path / "none")],
            "no deployment at",
        ),
        (["serve", "--registry", str(tmp_path / "missing.sqlite"), "--state", state], "no registry at"),
        (["tinker", "serve", "--set", "arena_prompts=x", "--state", state], "arena_prompts"),
        (["tinker", "serve", "--set", "max_tokens=5", "--state", state], "max_tokens is set by a flag"),
    ]
    for args, message in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_serve_tinker_is_refused_naming_the_new_command(tmp_path):
    """The old spelling is one line naming `temper tinker serve`, whatever other flags stand beside it."""
    for extra in ([], ["--canary-share", "0.5", "--port", "0"], ["--log-text"]):
        res = runner.invoke(app, ["serve", *extra, "--tinker", "--state", str(tmp_path / "dep")])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == "error: --tinker is now its own command, `temper tinker serve`"
    assert not (tmp_path / "dep").exists()


def test_tinker_serve_has_only_flags_that_reach_its_config(tmp_path, monkeypatch):
    """Every option of `temper tinker serve` sets its TinkerServeConfig field (none would do
    nothing), and an OpenAI-server flag does not exist there."""
    from types import SimpleNamespace

    import typer

    from tempering.serve import tinker

    seen = {}
    served = SimpleNamespace(state=SimpleNamespace(jobs=SimpleNamespace(owners=SimpleNamespace(lost={}))))
    monkeypatch.setattr(tinker, "create_tinker_app", lambda cfg: seen.setdefault("cfg", cfg) and served)
    monkeypatch.setattr(tinker, "serve_tinker", lambda app: None)
    monkeypatch.delenv("TEMPERING_REGISTRY", raising=False)
    given = {
        "--host": "127.0.0.2",
        "--port": "8123",
        "--state": str(tmp_path / "dep"),
        "--registry": str(tmp_path / "r.sqlite"),
        "--model": "some-model",
        "--rate-limit": "7",
        "--max-tokens": "9",
        "--precision": "fp32",
        "--set": "max_samplers=5",
    }
    root: Any = typer.main.get_command(app)
    command = root.commands["tinker"].commands["serve"]
    options = {o for p in command.params for o in p.opts if not p.hidden}
    assert options == set(given)
    res = runner.invoke(app, ["tinker", "serve", *[x for kv in given.items() for x in kv]])
    assert res.exit_code == 0, res.output
    cfg = seen["cfg"]
    assert (cfg.host, cfg.port, cfg.state, cfg.registry) == ("127.0.0.2", 8123, tmp_path / "dep", given["--registry"])
    assert (cfg.model, cfg.rate_limit, cfg.max_tokens, cfg.precision, cfg.max_samplers) == (
        "some-model",
        7,
        9,
        "fp32",
        5,
    )
    for flag in ("--canary-share", "--log-text", "--quantize", "--arena-prompts", "--capture-tokens"):
        assert flag not in options


def test_exports_of_an_empty_deployment(tmp_path):
    state = str(tmp_path / "dep")
    runner.invoke(app, ["keys", "create", "alice", "--state", state])
    res = runner.invoke(app, ["arena", "export", "--out", str(tmp_path / "v.jsonl"), "--state", state])
    assert res.exit_code == 0 and "wrote 0 pair(s)" in res.output
    assert (tmp_path / "v.jsonl").read_text() == ""


def test_serve_on_a_port_in_use_fails_before_it_announces_or_writes_anything(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        state = tmp_path / "dep"
        res = runner.invoke(app, ["serve", "--port", str(port), "--state", str(state), "--model", "no-such-model"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "serving" not in res.output
    assert res.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another server there? choose another --port)"
    )
    assert not state.exists()


def test_serve_with_a_model_that_cannot_load_leaves_no_deployment(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    state = tmp_path / "dep"
    res = runner.invoke(app, ["serve", "--port", "0", "--state", str(state), "--model", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "Traceback" not in res.output and "serving" not in res.stdout, res.output
    assert str(tmp_path / "nothing") in res.stderr.strip().splitlines()[-1]
    assert not state.exists()


def test_serve_warms_up_hints_at_keys_then_announces(tiny_models, tmp_path):
    import os
    import subprocess
    import sys
    import time

    import httpx

    from tests.serve.conftest import free_port

    port, state = free_port(), tmp_path / "dep"
    args = ["serve", "--port", str(port), "--state", str(state), "--model", str(tiny_models[1])]
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tempering.cli", *args], stdout=sink, stderr=sink, env=os.environ
        )
        try:
            deadline, health = time.time() + 120, None
            while time.time() < deadline and health is None:
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                except httpx.HTTPError:
                    time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(30)
    lines = log.read_text().splitlines()
    assert health == {"status": "ok", "models": [str(tiny_models[1])]}, lines
    warming = next(i for i, line in enumerate(lines) if "warming it up" in line)
    hint = next(i for i, line in enumerate(lines) if f"temper keys create NAME --state {state}" in line)
    serving = next(i for i, line in enumerate(lines) if line.startswith(f"serving {tiny_models[1]} on "))
    assert warming < hint < serving, lines
    assert any("KV cache" in line and "bytes/token" in line for line in lines[warming:serving]), lines
