"""Keys are required, revocation holds at once, keys cannot read each other's
audit rows or feedback, and the audit log cannot be rewritten (through the API or in SQL)."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from tempering.serve.store import Store, hash_secret

ASK = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def post(url, path, key, body):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


def get(url, path, key):
    return httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture(scope="module")
def two_keys(server):
    url, _, app = server
    store = app.state.store
    model = app.state.models.listing()[0]["id"]
    return url, model, store, store.create_key("alice")[1], store.create_key("bob")[1]


def test_requests_without_a_valid_key_are_refused_and_audited(two_keys):
    url, model, store, _, _ = two_keys
    before = len(store.audit_rows(None, limit=10_000))
    for key in (None, "tmp-not-a-key", ""):
        r = post(url, "/v1/chat/completions", key, {**ASK, "model": model})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url + "/v1/models").status_code == 401
    refused = store.audit_rows(None, limit=10_000)[before:]
    assert [(r["key_id"], r["endpoint"], r["status"]) for r in refused] == (
        [("-", "/v1/chat/completions", 401)] * 3 + [("-", "/v1/models", 401)]
    )
    assert refused[0]["request"] == {"client": "127.0.0.1", "reason": "no or unknown key"}


def test_a_revoked_key_stops_at_once(two_keys):
    url, model, store, _, _ = two_keys
    _, secret = store.create_key("short-lived")
    assert post(url, "/v1/chat/completions", secret, {**ASK, "model": model}).status_code == 200
    store.revoke_key("short-lived")  # what `temper keys revoke` does, while the server runs
    assert post(url, "/v1/chat/completions", secret, {**ASK, "model": model}).status_code == 401
    last = store.audit_rows(None, limit=10_000)[-1]  # filed under the revoked key: who still uses it shows
    assert last["status"] == 401 and last["key_id"] == store.key_of(secret).id
    assert last["request"]["reason"] == "revoked key"


def test_keys_are_stored_hashed(two_keys):
    _, _, store, alice, _ = two_keys
    rows = sqlite3.connect(store.path).execute("SELECT * FROM keys").fetchall()
    flat = " ".join(str(v) for row in rows for v in row)
    assert alice not in flat and hash_secret(alice) in flat


def test_one_key_cannot_read_anothers_audit_or_feedback(two_keys):
    url, model, _, alice, bob = two_keys
    answer = post(url, "/v1/chat/completions", alice, {**ASK, "model": model}).json()
    fb = post(url, "/v1/feedback", alice, {"response_id": answer["id"], "kind": "thumbs_down", "comment": "wrong"})
    assert fb.status_code == 200
    alice_audit = get(url, "/v1/audit", alice).json()["data"]
    assert answer["id"] in {r["response_id"] for r in alice_audit}
    bob_audit = get(url, "/v1/audit", bob).json()["data"]
    assert answer["id"] not in {r["response_id"] for r in bob_audit}
    assert len({r["key_id"] for r in alice_audit + bob_audit}) == len({r["key_id"] for r in alice_audit}) + len(
        {r["key_id"] for r in bob_audit}
    )  # no row in both
    assert get(url, "/v1/feedback", bob).json()["data"] == []
    assert [f["response_id"] for f in get(url, "/v1/feedback", alice).json()["data"]] == [answer["id"]]
    # nor give feedback on alice's answer
    r = post(url, "/v1/feedback", bob, {"response_id": answer["id"], "kind": "thumbs_up"})
    assert r.status_code == 404


def test_the_audit_log_is_append_only(two_keys):
    url, model, store, alice, _ = two_keys
    post(url, "/v1/chat/completions", alice, {**ASK, "model": model})
    rows = get(url, "/v1/audit", alice).json()["data"]
    target = rows[0]["id"]
    headers = {"Authorization": f"Bearer {alice}"}
    for method in ("DELETE", "PUT", "PATCH"):
        for path in ("/v1/audit", f"/v1/audit/{target}"):
            r = httpx.request(method, url + path, headers=headers, json={"status": 200, "completion_tokens": 0})
            assert r.status_code in (404, 405) and "error" in r.json()
    r = post(url, "/v1/audit", alice, {"key_id": "key-x", "status": 200})
    assert r.status_code == 405
    conn = sqlite3.connect(store.path, isolation_level=None)  # even with the file at hand, SQL cannot
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE audit SET status = 500 WHERE id = ?", (target,))
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM audit")
    conn.close()
    assert get(url, "/v1/audit", alice).json()["data"][0] == rows[0]


def test_rate_limit_per_key(two_keys):
    url, model, store, _, _ = two_keys
    _, secret = store.create_key("slow", rate_limit=2)
    codes = [get(url, "/v1/models", secret).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    r = get(url, "/v1/models", secret)
    assert r.json()["error"]["type"] == "rate_limit_error" and r.headers["retry-after"] == "60"


def test_store_refuses_duplicate_names(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.create_key("a")
    with pytest.raises(ValueError, match="exists already"):
        store.create_key("a")


def test_refused_requests_from_one_address_are_rate_limited_and_stop_filling_the_audit_log(tiny_models, tmp_path):
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig
    from tests.serve.conftest import ServerThread

    app = create_app(ServeConfig(state=tmp_path / "state", model=str(tiny_models[1]), rate_limit=3))
    _, secret = app.state.store.create_key("ok")
    server = ServerThread(app)
    try:
        codes = [
            httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer nope"}, timeout=30).status_code
            for _ in range(5)
        ]
        good = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    finally:
        server.stop()
    assert codes == [401, 401, 401, 429, 429] and good.status_code == 200  # a valid key is not locked out
    assert [r["status"] for r in app.state.store.audit_rows(None, limit=100)] == [401, 401, 401]
