"""Attacks on `temper serve` through a real server on 127.0.0.1: poisoned feedback, stuffed
or snooped arena votes, bodies that crashed or starved the server, and floods that filled
its audit log or its metrics. Each test tries what a client could send and checks the
server's answer and what it stored."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import pytest
import torch
from tests.serve.conftest import LOGIT, TEXT_PIECES, ServerThread, chain_model, tiny_models, tiny_tokenizer

from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig

__all__ = ["tiny_models"]  # the served tiny models (a session fixture of tests/serve)
PASSED = {"passed": True, "rules": []}
ARENA_PROMPTS = ["What is 2+2?", "Name a colour."]
ASK = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(autouse=True)
def host_guard():
    """The serve attacks run no sandbox: the battery's guard of sandbox leftovers (which
    starts a sandbox pool) has nothing to check here."""
    yield


@pytest.fixture(scope="module")
def deployment(tiny_models, tmp_path_factory):
    """A server of two releases (v1 the tool model, v2 the text model) with arena prompts,
    text logging on and two keys; yields (url, alice, bob, app)."""
    root = tmp_path_factory.mktemp("deployment")
    releases = Releases(Registry(root / "registry.sqlite"))
    for model, alias in zip(tiny_models, ("production", "candidate")):  # the arena pairs live releases
        releases.promote(model, gate=PASSED, alias=alias)
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(ARENA_PROMPTS) + "\n")
    cfg = ServeConfig(
        state=root / "state",
        registry=str(root / "registry.sqlite"),
        log_text=True,
        arena_prompts=prompts,
        arena_temperature=0,
        arena_max_tokens=8,
        max_tokens=16,
    )
    app = create_app(cfg)
    alice, bob = (app.state.store.create_key(name)[1] for name in ("alice", "bob"))
    server = ServerThread(app)
    yield server.url, alice, bob, app
    server.stop()


def post(url, path, key, body=None, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + path, json=body, headers=headers, timeout=120, **kw)


def raw_post(url, path, key, text):
    """A body sent as written (JSON a client library would never produce)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return httpx.post(url + path, content=text.encode("utf-8", "surrogatepass"), headers=headers, timeout=120)


# ------------------------------------------------------------------ feedback -> training tasks
def test_feedback_cannot_name_a_tasks_id_prompt_or_verifier(deployment, tmp_path):
    from tempering.recipes.feedback import read_served
    from tempering.serve.exports import feedback_rows

    url, alice, _, app = deployment
    client = openai.OpenAI(base_url=url + "/v1", api_key=alice, max_retries=0, timeout=60)
    rid = client.chat.completions.create(model="v2", messages=ASK, temperature=0).id
    poisoned = [
        {"answer": "4", "id": "rl-task-1"},
        {"answer": "4", "prompt": "Write a script that deletes the repository."},
        {"verifier": {"type": "code", "tests": "import os; os.system('curl evil')"}},
        {"answer": "4", "verifier": {"type": "regex", "pattern": "(a+)+$"}},
    ]
    for task in poisoned:
        r = post(url, "/v1/feedback", alice, {"response_id": rid, "kind": "thumbs_down", "task": task})
        assert r.status_code == 400, (task, r.text)
    r = post(url, "/v1/feedback", alice, {"response_id": rid, "kind": "thumbs_down", "task": {"answer": "4"}})
    assert r.status_code == 200, r.text
    rows, _ = feedback_rows(app.state.store)
    served = tmp_path / "served.jsonl"
    served.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _, tasks, _, _, errors = read_served([str(served)])
    assert not errors and len(tasks) == 1
    task = tasks[0].model_dump(exclude_none=True)
    # the id and the prompt are what the server recorded for the response; the verifier follows the answer
    assert task == {
        "id": f"feedback-{r.json()['id']}",
        "messages": ASK,
        "verifier": {"type": "numeric", "answer": "4"},
        "track": "general",
        "source": "feedback",
    }


def test_a_bad_feedback_row_is_quarantined_and_the_stage_still_runs(deployment, tmp_path):
    """Feedback is append-only: a row the landed server accepted (a task with its own id,
    prompt and verifier) stays in the database for good. The stage quarantines it."""
    from typer.testing import CliRunner

    from tempering.cli import app as cli
    from tempering.config import FeedbackConfig
    from tempering.recipes.feedback import run_feedback

    url, _, bob, app = deployment
    store = app.state.store
    client = openai.OpenAI(base_url=url + "/v1", api_key=bob, max_retries=0, timeout=60)
    good, old = (client.chat.completions.create(model="v2", messages=ASK, temperature=0).id for _ in range(2))
    assert post(
        url, "/v1/feedback", bob, {"response_id": good, "kind": "thumbs_down", "task": {"answer": "4"}}
    ).is_success
    legacy = {"id": "x", "prompt": "other", "verifier": {"type": "code", "tests": "assert True"}}
    store.add_feedback(store.key_of(bob).id, old, "thumbs_down", task=legacy)  # as the landed server stored it
    served = tmp_path / "served.jsonl"
    res = CliRunner().invoke(cli, ["feedback", "export", "--out", str(served), "--state", str(app.state.cfg.state)])
    assert res.exit_code == 0, res.output
    summary = run_feedback(FeedbackConfig(served=[str(served)], out=str(tmp_path / "runs"), name="fb"))
    out = tmp_path / "runs" / "fb"
    tasks = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert summary["served_quarantined"] == 1 and summary["served_tasks"] == len(tasks) >= 1
    assert all(t["verifier"]["type"] in ("numeric", "exact") and t["id"] != "feedback-x" for t in tasks)
    assert all(t.get("prompt") != "other" for t in tasks)
    quarantined = [json.loads(line) for line in (out / "served.quarantine.jsonl").read_text().splitlines()]
    assert len(quarantined) == 1 and quarantined[0]["raw"]["task"] == legacy and "task" in quarantined[0]["reason"]


# ------------------------------------------------------------------ arena
def test_one_key_casts_one_vote_per_battle(deployment):
    url, _, bob, app = deployment
    battle = post(url, "/arena/battles", bob, {"annotator": "sock"})
    if battle.status_code == 400:  # the annotator is the key now
        battle = post(url, "/arena/battles", bob, {})
    battle = battle.json()
    accepted = 0
    for i in range(20):  # invented annotators (the landed API's field), then the same key again and again
        for body in ({"annotator": f"sock{i}", "choice": "a"}, {"choice": "a"}):
            accepted += post(url, f"/arena/battles/{battle['id']}/votes", bob, body).status_code == 200
    assert accepted == 1
    from tempering.serve.arena import arena_pairs, arena_ranking

    votes = [v for v in app.state.store.votes() if v["battle_id"] == battle["id"]]
    assert [v["annotator"] for v in votes] == ["bob"]  # the key's name, not one the client typed
    assert arena_ranking(votes)["votes"] == 1
    assert [len(p["votes"]) for p in arena_pairs(votes)[0]] == [1]


def test_another_keys_private_prompt_is_never_shown_nor_votable(deployment):
    url, alice, bob, app = deployment
    secret = "My private question about our merger with Initech"
    mine = post(url, "/arena/battles", alice, {"annotator": "alice", "prompt": secret})
    if mine.status_code == 400:  # the annotator is the key now
        mine = post(url, "/arena/battles", alice, {"prompt": secret})
    assert mine.status_code == 200 and mine.json()["prompt"] == secret
    shown = []
    for _ in range(3):
        for body in ({"annotator": "bob"}, {}):
            r = post(url, "/arena/battles", bob, body)
            if r.status_code == 200:
                shown.append(r.json())
                vote = {**body, "choice": "b"}
                post(url, f"/arena/battles/{r.json()['id']}/votes", bob, vote)  # judged: the next is another
    assert shown and all(b["prompt"] in ARENA_PROMPTS and b["id"] != mine.json()["id"] for b in shown)
    for body in ({"annotator": "bob", "choice": "a"}, {"choice": "a"}):
        r = post(url, f"/arena/battles/{mine.json()['id']}/votes", bob, body)
        assert r.status_code in (400, 404) and secret not in r.text
    assert not [v for v in app.state.store.votes() if v["battle_id"] == mine.json()["id"]]
    post(url, f"/arena/battles/{shown[0]['id']}/votes", alice, {"choice": "a"})  # both keys judged one battle
    agreement = httpx.get(url + "/arena/ranking", headers={"Authorization": f"Bearer {bob}"}).json()["agreement"]
    assert set(agreement["per_annotator"]) <= {"bob"}  # annotators are keys: no other key's name is shown


# ------------------------------------------------------------------ bodies that crashed the server
def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_BODIES = {
    "tool-call arguments nested 100000 deep": json.dumps(
        {
            "model": "v2",
            "messages": [
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": deep(100_000)}}]},
                {"role": "user", "content": "x"},
            ],
        }
    ),
    "tool parameters nested 500 deep": json.dumps(
        {
            "model": "v2",
            "messages": ASK,
            "tools": [{"function": {"name": "f", "parameters": {"a": json.loads(deep(500))}}}],
        }
    ),
    "a lone surrogate in content": '{"model": "v2", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
    "a lone surrogate in a key": '{"model": "v2", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"\\udc00": "x"}}',
    "a lone surrogate in the model name": '{"model": "v\\ud800", "messages": [{"role": "user", "content": "x"}]}',
    "a 5000-digit version": json.dumps({"model": "v" + "9" * 5000, "messages": ASK}),
    "a 5000-digit model name": json.dumps({"model": "1" * 5000, "messages": ASK}),
    "a JSON schema that is a list": json.dumps(
        {"model": "v2", "messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"schema": [1]}}}
    ),
    "a body nested 100000 deep": '{"model": "v2", "messages": ' + deep(100_000) + "}",
}


@pytest.mark.parametrize("what", list(BAD_BODIES))
def test_bad_input_is_a_4xx_never_a_500(deployment, what):
    url, alice, _, _ = deployment
    r = raw_post(url, "/v1/chat/completions", alice, BAD_BODIES[what])
    assert 400 <= r.status_code < 500, (what, r.status_code, r.text[:300])
    assert r.json()["error"]["message"]


def test_the_key_is_checked_and_the_size_capped_before_a_body_is_read(deployment):
    url, alice, _, app = deployment
    # without a key, a malformed body is refused for the key: it was never parsed
    r = httpx.post(url + "/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    # a 64 MiB Content-Length is answered at once (413) while the body is still unsent
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + alice.encode() + b"\r\nContent-Length: 67108864\r\n\r\n{"
        )
        head = s.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 413"), head[:200]
    # a chunked body (no length given) is cut off once it passes the cap
    cap = app.state.cfg.max_body_bytes
    chunks = [b'{"model": "v2", "messages": [{"role": "user", "content": "'] + [b"x" * 65536] * (cap // 65536 + 2)
    r = httpx.post(
        url + "/v1/chat/completions",
        content=iter(chunks + [b'"}]}']),
        headers={"Authorization": f"Bearer {alice}", "Content-Type": "application/json"},
        timeout=120,
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_made_up_paths_add_no_metrics_labels(deployment):
    url, alice, _, app = deployment
    for i in range(30):
        httpx.get(f"{url}/probe-{i}/{'x' * i}")
        httpx.get(f"{url}/v1/models/made-up-{i}", headers={"Authorization": f"Bearer {alice}"})
    metrics = httpx.get(url + "/metrics").text
    endpoints = {line.split('endpoint="')[1].split('"')[0] for line in metrics.splitlines() if 'endpoint="' in line}
    templates = {route.path for route in app.routes}
    assert endpoints <= templates | {"unmatched"}, endpoints - templates
    assert {"unmatched", "/v1/models/{name}"} <= endpoints


def test_one_request_cannot_fan_out_past_max_sequences(deployment):
    url, alice, _, app = deployment
    r = post(url, "/v1/completions", alice, {"model": "v2", "prompt": ["a"] * 64, "n": 16, "max_tokens": 1})
    assert r.status_code == 400, len(r.json().get("choices", []))
    cap = app.state.cfg.max_sequences
    assert f"allows {cap}" in r.json()["error"]["message"]
    r = post(url, "/v1/completions", alice, {"model": "v2", "prompt": ["a"] * (cap // 8), "n": 8, "max_tokens": 1})
    assert r.status_code == 200 and len(r.json()["choices"]) == cap


# ------------------------------------------------------------------ the audit log
def looping_model(out):
    """The text model with its last piece leading back to the first: it never stops on its own."""
    from transformers import AutoModelForCausalLM

    path = chain_model(TEXT_PIECES, out)
    model = AutoModelForCausalLM.from_pretrained(path)
    first, last = (tiny_tokenizer().convert_tokens_to_ids(p) for p in (TEXT_PIECES[0], TEXT_PIECES[-1]))
    with torch.no_grad():
        model.lm_head.weight[:, last] = 0.0
        model.lm_head.weight[first, last] = LOGIT
    model.save_pretrained(path)
    return path


def test_a_stream_cut_before_its_end_is_audited(tmp_path):
    app = create_app(ServeConfig(state=tmp_path / "state", model=str(looping_model(tmp_path / "loop")), max_tokens=400))
    _, key = app.state.store.create_key("streamer")
    server = ServerThread(app)
    try:
        body = {"model": app.state.models.listing()[0]["id"], "messages": ASK, "stream": True, "max_tokens": 400}
        with httpx.stream(
            "POST", server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as r:
            first = next(line for line in r.iter_lines() if line.startswith("data: {"))
        rid = json.loads(first[6:])["id"]  # the client left after the first chunk of a 400-token answer
        rows, deadline = [], time.monotonic() + 60
        while not rows and time.monotonic() < deadline:  # the server notices the disconnect on its own time
            rows = [row for row in app.state.store.audit_rows(None, limit=100) if row["response_id"] == rid]
            time.sleep(0.05)
    finally:
        server.stop()
    assert len(rows) == 1 and rows[0]["status"] == 499 and rows[0]["model"] and rows[0]["prompt_tokens"] > 0


def test_a_client_that_leaves_stops_its_decoding(tmp_path):
    """A stream cut after its first chunks does not go on decoding its 400 tokens for nobody."""
    app = create_app(ServeConfig(state=tmp_path / "state", model=str(looping_model(tmp_path / "loop")), max_tokens=400))
    _, key = app.state.store.create_key("leaver")
    server = ServerThread(app)
    try:
        models = app.state.models
        name = models.listing()[0]["id"]
        engine = models.served(models.route(name)).engine
        steps, step = [], engine.step  # count the serving thread's decode steps (one token per running sequence)
        engine.step = lambda: (steps.append(1), step())[1]
        body = {"model": name, "messages": ASK, "stream": True, "max_tokens": 400}
        with httpx.stream(
            "POST", server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as r:
            chunks = (line for line in r.iter_lines() if line.startswith("data: {"))
            for _ in range(3):
                next(chunks)
        deadline = time.monotonic() + 120  # a bound on the wait, not a claim about speed
        while engine.kv_cache_bytes and time.monotonic() < deadline:  # the cache is freed once nothing runs
            time.sleep(0.05)
    finally:
        server.stop()
    assert 2 <= len(steps) < 400, len(steps)  # two token chunks were read; without the cancel: 400


def test_rate_limited_requests_are_counted_not_audited_one_by_one(tiny_models, tmp_path):
    app = create_app(ServeConfig(state=tmp_path / "state", model=str(tiny_models[1])))
    key, secret = app.state.store.create_key("hammer", rate_limit=2)
    server = ServerThread(app)
    try:
        codes = [
            httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code
            for _ in range(40)
        ]
        during = [r for r in app.state.store.audit_rows(key.id, limit=1000) if r["status"] == 429]
    finally:
        server.stop()  # shutdown writes the count of refusals not yet audited
    assert codes == [200, 200] + [429] * 38
    assert len(during) == 1  # one synced write for 38 refusals, not 38
    refused = [r for r in app.state.store.audit_rows(key.id, limit=1000) if r["status"] == 429]
    assert len(refused) == 2 and sum(r["request"]["refused"] for r in refused) == 38  # none goes uncounted
