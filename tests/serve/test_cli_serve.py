"""`temper keys`, `temper feedback export`, `temper arena export`, `temper serve` argument errors: one line, no traceback."""

from __future__ import annotations

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
    assert secret.startswith("tmp-") and store.authenticate(secret).name == "alice"
    listed = runner.invoke(app, ["keys", "list", "--state", state]).output
    assert "alice  active  rate_limit=5" in listed and secret not in listed
    assert runner.invoke(app, ["keys", "revoke", "alice", "--state", state]).exit_code == 0
    assert store.authenticate(secret) is None
    assert "revoked" in runner.invoke(app, ["keys", "list", "--state", state]).output


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
        (["serve", "--tinker", "--canary-share", "0.5", "--state", state], "--canary-share does nothing with --tinker"),
        (["serve", "--tinker", "--set", "arena_prompts=x", "--state", state], "arena_prompts"),
        (["serve", "--tinker", "--set", "max_tokens=5", "--state", state], "max_tokens is set by a flag"),
    ]
    for args, message in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_exports_of_an_empty_deployment(tmp_path):
    state = str(tmp_path / "dep")
    runner.invoke(app, ["keys", "create", "alice", "--state", state])
    res = runner.invoke(app, ["arena", "export", "--out", str(tmp_path / "v.jsonl"), "--state", state])
    assert res.exit_code == 0 and "wrote 0 pair(s)" in res.output
    assert (tmp_path / "v.jsonl").read_text() == ""
