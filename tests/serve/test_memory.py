"""A server gives its memory back: shutting it down stops its engines (their threads held the
models and KV caches), and a served engine's KV cache is bounded by `engine.max_cache_tokens`."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from tests.serve.conftest import TEXT_ANSWER, ServerThread


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_shutting_the_server_down_stops_its_engines(tiny_models, tmp_path):
    import openai

    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    app = create_app(ServeConfig(state=tmp_path / "state", model=str(tiny_models[1])))
    _, secret = app.state.store.create_key("k")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=str(tiny_models[1]), messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
        )
        assert reply.choices[0].message.content == TEXT_ANSWER
        models = app.state.models
        engine = models.served(models.route(str(tiny_models[1]))).engine
        assert engine.serving
    finally:
        server.stop()
    assert not engine.serving


def test_served_engines_get_the_default_cache_budget(tiny_models):
    from tempering.serve.backend import MAX_LEN, engine_for
    from tempering.serve.config import CACHE_TOKENS, SLOTS, ServeConfig

    served = engine_for(str(tiny_models[1]), "fp32")
    try:
        assert served.engine.max_cache_tokens == CACHE_TOKENS < SLOTS * MAX_LEN
    finally:
        served.engine.stop()
    assert ServeConfig().engine.max_cache_tokens == CACHE_TOKENS


def test_a_request_past_the_cache_budget_is_a_400_and_the_server_goes_on(tiny_models, tmp_path):
    import openai

    from tempering.config import EngineSettings
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    engine = EngineSettings(max_slots=32, max_cache_tokens=600)
    app = create_app(ServeConfig(state=tmp_path / "state", model=str(tiny_models[1]), engine=engine))
    _, secret = app.state.store.create_key("k")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=60)
        ask = dict(model=str(tiny_models[1]), messages=[{"role": "user", "content": "hi"}], temperature=0)
        with pytest.raises(openai.BadRequestError, match="KV cache positions") as err:
            client.chat.completions.create(**ask, n=4, max_tokens=200)
        assert err.value.status_code == 400
        assert client.chat.completions.create(**ask, n=2, max_tokens=8).choices[1].message.content == TEXT_ANSWER
    finally:
        server.stop()


def _streams(url: str, secret: str, n: int, max_tokens: int) -> list[str]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0, timeout=600)
    texts: list[str] = [""] * n

    def one(i: int) -> None:
        for c in client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": f"Count from {i} to {i + 5}."}],
            max_tokens=max_tokens,
            temperature=0.7,
            seed=i,
            stream=True,
        ):
            texts[i] += (c.choices[0].delta.content or "") if c.choices else ""

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return texts


def _trimmed_rss_mb() -> float:
    """RSS after glibc hands its free heap pages back: what other tests left fragmented in this
    process is not counted as held (a freed engine's pages otherwise stay mapped)."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _rss_mb()


@pytest.mark.slow
def test_default_model_servers_started_one_after_another_do_not_pile_up(tmp_path):
    """Two default-model servers in turn, each answering 32 concurrent streams: once a server is
    shut down its engine and model are garbage (nothing, such as the engine's thread, still holds
    them), and the process holds no more after the second than after the first (an engine kept
    alive holds 0.5 GB of weights plus its KV cache)."""
    import weakref

    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    after = []
    for i in range(2):
        app = create_app(ServeConfig(state=tmp_path / f"state{i}"))
        _, secret = app.state.store.create_key("k")
        server = ServerThread(app)
        try:
            texts = _streams(server.url, secret, 32, 8)
            models = app.state.models
            served = models.served(models.route("smollm2-135m-instruct"))
            engine, model = weakref.ref(served.engine), weakref.ref(served.engine.model)
            del served, models
        finally:
            server.stop()
        assert all(texts)
        del app, server
        gc.collect()
        assert engine() is None and model() is None, f"server {i}'s engine outlived its shutdown"
        after.append(_trimmed_rss_mb())
    assert after[1] - after[0] < 300, after
