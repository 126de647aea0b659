"""The default model (smollm2-135m-instruct) behind `temper serve`, through the official client."""

from __future__ import annotations

import pytest

from tests.serve.conftest import ServerThread


@pytest.mark.slow
def test_default_model_plain_and_streamed_agree(tmp_path):
    import openai

    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    app = create_app(ServeConfig(state=tmp_path / "state"))
    _, secret = app.state.store.create_key("slow")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=300)
        assert [m.id for m in client.models.list().data] == ["smollm2-135m-instruct"]
        ask = dict(model="smollm2-135m-instruct", messages=[{"role": "user", "content": "What is the capital of France?"}],
                   temperature=0, seed=1, max_tokens=12, logprobs=True)
        plain = client.chat.completions.create(**ask)
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == plain.choices[0].message.content and "Paris" in streamed
        assert chunks[-1].usage == plain.usage and plain.usage.completion_tokens <= 12
        n_content = len(plain.choices[0].logprobs.content)
        assert n_content == plain.usage.completion_tokens - (plain.choices[0].finish_reason == "stop")
    finally:
        server.stop()
