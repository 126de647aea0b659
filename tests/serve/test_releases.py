"""Serving the registry's releases: one model entry per alias and version, canary routing,
promotion and rollback taking effect without a restart."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig
from tests.serve.conftest import TEXT_ANSWER, TOOL_ANSWER

PASSED = {"passed": True, "rules": []}


@pytest.fixture()
def deployment(tiny_models, tmp_path):
    """Registry: v1 = tool model (production), v2 = text model (candidate); a server and a key."""
    tool, text = tiny_models
    registry = Registry(tmp_path / "registry.sqlite")
    releases = Releases(registry)
    releases.promote(tool, gate=PASSED)
    releases.promote(text, gate=PASSED, alias="candidate")

    def make(**kw):
        cfg = ServeConfig(state=tmp_path / "state", registry=str(tmp_path / "registry.sqlite"), **kw)
        app = create_app(cfg)
        _, secret = app.state.store.create_key(f"k{len(app.state.store.keys())}")
        return TestClient(app, headers={"Authorization": f"Bearer {secret}"})

    return releases, make


def ask(client, model):
    r = client.post(
        "/v1/chat/completions", json={"model": model, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 200, r.text
    return r.json()["model"], r.json()["choices"][0]["message"]["content"]


def test_models_lists_aliases_and_versions(deployment):
    _, make = deployment
    entries = make().get("/v1/models").json()["data"]
    assert [(e["id"], e["status"], e["release"]) for e in entries] == [
        ("production", "production", "v1"),
        ("candidate", "candidate", "v2"),
        ("v2", "candidate", "v2"),
        ("v1", "production", "v1"),
    ]
    for e in entries:  # OpenAI's Model object, with no status hidden in one of its fields
        assert {k: type(e[k]) for k in ("id", "object", "created", "owned_by")} == {
            "id": str,
            "object": str,
            "created": int,
            "owned_by": str,
        }
        assert e["object"] == "model" and "root" not in e


def test_the_arena_pairs_only_live_releases(deployment, tiny_models):
    releases, make = deployment
    models = make().app.state.models
    assert {r.name for r in models.release_routes()} == {"v1", "v2"}
    releases.promote(tiny_models[1], gate=PASSED)  # v3 production: v1 is retired
    assert [r.status for r in releases.list()] == ["production", "candidate", "retired"]
    assert {r.name for r in models.release_routes()} == {"v3", "v2"}


def test_startup_loads_and_runs_the_production_model_before_any_request(deployment, tiny_models):
    _, make = deployment
    client = make()
    models = client.app.state.models
    assert models.warmed is None and not models._loaded
    with client:  # the app's startup: the server accepts requests (and /health answers) only after it
        assert models.warmed == "v1" and list(models._loaded) == [str(tiny_models[0])]
        assert client.get("/health").json()["status"] == "ok"


def test_aliases_and_versions_route(deployment):
    _, make = deployment
    client = make()
    assert ask(client, "production") == ("v1", TOOL_ANSWER)
    assert ask(client, "candidate") == ("v2", TEXT_ANSWER)
    assert ask(client, "v2") == ("v2", TEXT_ANSWER)
    assert (
        client.post(
            "/v1/chat/completions", json={"model": "v9", "messages": [{"role": "user", "content": "x"}]}
        ).json()["error"]["code"]
        == "model_not_found"
    )


def test_canary_share_sends_that_share_to_the_candidate(deployment):
    _, make = deployment
    client = make(canary_share=0.25, seed=0)
    models = client.app.state.models  # the router every request goes through (no generation needed to count)
    routed = [models.route("production").name for _ in range(300)]
    share = routed.count("v2") / len(routed)
    assert 0.25 - 0.075 <= share <= 0.25 + 0.075  # binomial(300, 0.25) / 300: sd 0.025, so 3 sd
    answered = {ask(client, "production") for _ in range(12)}  # and the answers follow the route
    assert answered == {("v1", TOOL_ANSWER), ("v2", TEXT_ANSWER)}  # P(no candidate in 12) = 0.75^12 = 3%, seeded


def test_promotion_and_rollback_need_no_restart(deployment, tiny_models):
    releases, make = deployment
    client = make()
    assert ask(client, "production") == ("v1", TOOL_ANSWER)
    releases.promote(tiny_models[1], gate=PASSED)  # v3 = the text model, now production
    assert ask(client, "production") == ("v3", TEXT_ANSWER)
    releases.rollback("production")
    assert ask(client, "production") == ("v1", TOOL_ANSWER)
    audit = client.get("/v1/audit").json()["data"]
    assert [(r["model"], r["release"]) for r in audit] == [("v1", 1), ("v3", 3), ("v1", 1)]
