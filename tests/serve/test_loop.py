"""The serving loop closes. Served answers get feedback and arena votes; `temper feedback
export` and `temper arena export` write what the pipeline's `feedback` stage reads; a round
(feedback -> dpo) trains on them, and the lineage of the next release shows both exports as
its inputs, in their roles."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tempering.cli import app as cli
from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig
from tests.serve.conftest import TEXT_ANSWER, TOOL_ANSWER

PASSED = {"passed": True, "rules": []}


def serve_a_day(state: Path, registry: Path) -> None:
    """Two users ask, judge answers (a correction, a thumbs-down with the right answer, a thumbs-up),
    and both vote in the arena on the same battles (drawn from the arena's prompts: shared)."""
    prompts = state.parent / "arena_prompts.txt"
    prompts.write_text("What is 2+2?\nTwo plus two?\n")
    app = create_app(
        ServeConfig(
            state=state, registry=str(registry), log_text=True, seed=0, arena_temperature=0, arena_prompts=prompts
        )
    )
    keys = [app.state.store.create_key(name)[1] for name in ("alice", "bob")]
    alice, bob = (TestClient(app, headers={"Authorization": f"Bearer {k}"}) for k in keys)

    def ask(client, text):
        r = client.post(
            "/v1/chat/completions",
            json={"model": "production", "temperature": 0, "messages": [{"role": "user", "content": text}]},
        )
        return r.json()["id"]

    for client, rid, body in [
        (alice, ask(alice, "What is 2+2?"), {"kind": "correction", "correction": "4"}),
        (
            alice,
            ask(alice, "Add 1 and 3."),
            {
                "kind": "thumbs_down",
                "comment": "no tool needed",
                "task": {"answer": "4"},
            },
        ),
        (bob, ask(bob, "Say hi."), {"kind": "thumbs_up"}),
    ]:
        assert client.post("/v1/feedback", json={"response_id": rid, **body}).status_code == 200
    for _ in range(2):
        battle = alice.post("/arena/battles", json={}).json()
        for client in (alice, bob):
            if client is bob:  # the second annotator is served the same, unjudged battle
                assert client.post("/arena/battles", json={}).json()["id"] == battle["id"]
            side = "a" if battle["a"] == TEXT_ANSWER else "b"
            assert client.post(f"/arena/battles/{battle['id']}/votes", json={"choice": side}).status_code == 200


def test_feedback_and_votes_train_the_next_release(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    runs.mkdir()
    registry = runs / "registry.sqlite"
    releases = Releases(Registry(registry))
    releases.promote(tiny_models[0], gate=PASSED)  # v1: the tool-call model, production
    releases.promote(tiny_models[1], gate=PASSED, alias="candidate")  # v2: the text model
    state = tmp_path / "state"
    serve_a_day(state, registry)

    runner = CliRunner()
    served, votes = tmp_path / "served.jsonl", tmp_path / "votes.jsonl"
    res = runner.invoke(cli, ["feedback", "export", "--out", str(served), "--state", str(state)])
    assert res.exit_code == 0 and "wrote 3 feedback row(s)" in res.output, res.output
    res = runner.invoke(cli, ["arena", "export", "--out", str(votes), "--state", str(state)])
    assert res.exit_code == 0 and "wrote 2 pair(s)" in res.output, res.output
    rows = [json.loads(line) for line in served.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["correction", "thumbs_down", "thumbs_up"]
    assert rows[0]["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert rows[0]["completion"] == TOOL_ANSWER and rows[0]["release"] == "v1"
    pairs = [json.loads(line) for line in votes.read_text().splitlines()]
    assert all(p["chosen"] == TEXT_ANSWER and p["rejected"] == TOOL_ANSWER for p in pairs)
    assert [v["prefers"] for v in pairs[0]["votes"]] == ["chosen", "chosen"]

    stages = {
        "feedback": {"kind": "feedback", "served": [str(served)], "votes": [str(votes)]},
        "dpo": {
            "kind": "dpo",
            "model": str(tiny_models[0]),
            "lora": None,
            "data": {"train": ["${feedback.pairs}"], "max_length": 128},
            "train": {
                "steps": 2,
                "batch_size": 2,
                "precision": "fp32",
                "threads": 1,
                "optim": {"lr": 1e-4, "schedule": "constant", "warmup_steps": 0},
            },
        },
    }
    pipeline = tmp_path / "round.yaml"
    pipeline.write_text(yaml.safe_dump({"out": str(runs), "stages": stages}, sort_keys=False))
    res = runner.invoke(cli, ["run", str(pipeline)])
    assert res.exit_code == 0, res.output
    with Registry(registry) as reg:
        fb = next(r for r in reg.list() if r["kind"] == "feedback")
        assert (fb["metrics"]["corrections"], fb["metrics"]["votes"], fb["metrics"]["served_tasks"]) == (1, 2, 1)
        dpo = next(r for r in reg.list() if r["kind"] == "dpo")
        final = Path(next(o["path"] for o in reg.outputs(dpo["id"]) if o["role"] == "final"))
    release = Releases(Registry(registry)).promote(final, gate=PASSED, alias="candidate")  # v3
    assert release.run_id == dpo["id"]
    with Registry(registry) as reg:
        lineage = reg.lineage(release.run_id)
    roles = {(r.kind, r.role, Path(r.path).name) for r in lineage if r.path}
    assert ("feedback", "feedback", "served.jsonl") in roles and ("feedback", "votes", "votes.jsonl") in roles
    assert any(r.kind == "dpo" and r.role == "train" and r.parent_run == fb["id"] for r in lineage)
