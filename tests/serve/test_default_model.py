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
        ask = dict(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            temperature=0,
            seed=1,
            max_tokens=12,
            logprobs=True,
        )
        plain = client.chat.completions.create(**ask)
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == plain.choices[0].message.content and "Paris" in streamed
        assert chunks[-1].usage == plain.usage and plain.usage.completion_tokens <= 12
        n_content = len(plain.choices[0].logprobs.content)
        assert n_content == plain.usage.completion_tokens - (plain.choices[0].finish_reason == "stop")
    finally:
        server.stop()


@pytest.mark.slow
def test_default_model_streams_tokens_while_it_still_decodes(tmp_path):
    """The first content chunk reaches the client while the engine is still decoding the answer
    (token-by-token streaming), and the streamed text equals the plain answer."""
    import openai

    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    app = create_app(ServeConfig(state=tmp_path / "state"))
    _, secret = app.state.store.create_key("live")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=300)
        ask = dict(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "Write a story about a cat."}],
            temperature=0,
            seed=1,
            max_tokens=48,
        )
        text, running_at_first = "", None
        for c in client.chat.completions.create(**ask, stream=True):
            piece = c.choices[0].delta.content if c.choices else None
            if piece and running_at_first is None:
                engine = next(iter(app.state.models._loaded.values())).engine
                running_at_first = len(engine._scheduler.running)
            text += piece or ""
        plain = client.chat.completions.create(**ask)
    finally:
        server.stop()
    assert running_at_first == 1  # the answer was still being decoded when its first text arrived
    assert text == plain.choices[0].message.content and plain.usage.completion_tokens == 48


@pytest.mark.slow
def test_default_model_forced_tool_calls_and_json_mode_are_valid(tmp_path):
    """Constrained decoding on the 135M default model: forced calls name the tool and carry
    schema-valid arguments read from the question; a JSON-schema answer validates."""
    import json

    import jsonschema
    import openai

    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    params = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    }
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather of a city", "parameters": params},
        }
    ]
    person = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    app = create_app(ServeConfig(state=tmp_path / "state"))
    _, secret = app.state.store.create_key("tools")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=300)
        calls = []
        for city, question in (("Paris", "What's the weather in Paris?"), ("Oslo", "Is it cold in Oslo today?")):
            for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
                r = client.chat.completions.create(
                    model="smollm2-135m-instruct",
                    tools=tools,
                    tool_choice=choice,
                    messages=[{"role": "user", "content": question}],
                    temperature=0,
                    max_tokens=48,
                )
                (call,) = r.choices[0].message.tool_calls
                calls.append((city, call.function.name, json.loads(call.function.arguments)))
        r = client.chat.completions.create(
            model="smollm2-135m-instruct",
            temperature=0,
            max_tokens=60,
            messages=[{"role": "user", "content": "Give me a JSON with a name and an age for a fictional person."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": person}},
        )
    finally:
        server.stop()
    for city, name, args in calls:
        jsonschema.validate(args, params)
        assert name == "get_weather" and args["city"] == city  # the arguments come from the question
    jsonschema.validate(json.loads(r.choices[0].message.content), person)
