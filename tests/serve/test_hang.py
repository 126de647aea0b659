"""An engine step that never ends: requests get a 504 at `request_timeout_s` (a stream an error
event the official client raises), nothing waits forever, and `/health` answers 503 so a
supervisor restarts the server."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.serve.conftest import ServerThread


@pytest.fixture
def hung_server(tiny_models, tmp_path, monkeypatch):
    """A server whose engine answers once (the warm-up), then hangs in its next step until the test ends."""
    from tempering.rollout.batching_engine import BatchingEngine
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    release, hanging = threading.Event(), threading.Event()
    real_step = BatchingEngine.step

    def step(self):
        if hanging.is_set():
            release.wait(120)
        return real_step(self)

    monkeypatch.setattr(BatchingEngine, "step", step)
    cfg = ServeConfig(state=tmp_path / "state", model=str(tiny_models[1]), request_timeout_s=1.0)
    app = create_app(cfg)
    _, secret = app.state.store.create_key("tester")
    thread = ServerThread(app)
    try:
        yield thread.url, secret, hanging, str(tiny_models[1])
    finally:
        release.set()
        thread.stop()


def test_a_hung_engine_step_is_a_504_and_a_stuck_health_check(hung_server):
    import openai

    url, secret, hanging, model = hung_server
    client = openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model=model, messages=messages, max_tokens=4).choices
    assert httpx.get(url + "/health").status_code == 200
    hanging.set()
    with pytest.raises(openai.APIStatusError) as timed_out:
        client.chat.completions.create(model=model, messages=messages, max_tokens=4)
    assert timed_out.value.status_code == 504
    assert "the engine gave no answer within 1 s (request_timeout_s)" in str(timed_out.value)
    with pytest.raises(openai.APIError, match=r"the engine gave no answer within 1 s"):
        for _ in client.chat.completions.create(model=model, messages=messages, max_tokens=4, stream=True):
            pass
    health = httpx.get(url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "stuck"
