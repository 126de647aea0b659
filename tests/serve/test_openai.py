"""The official `openai` client against `temper serve`'s app (a hand-built model whose answers are known)."""

from __future__ import annotations

import json
import math

import httpx
import openai
import pytest

from tests.serve.conftest import LOGIT, TOOL_ANSWER, TOOL_PIECES

V = 271  # the tiny tokenizer: 256 bytes + 2 specials + 13 added pieces
STEP_LOGPROB = -math.log(1 + (V - 1) * math.exp(-LOGIT))  # -0.08670: the next piece's log-prob
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def model_id(client) -> str:
    return client.models.list().data[0].id


def collect(stream):
    """Text, tool calls, finish reason and usage accumulated from streamed chunks."""
    text, calls, finish, usage = "", {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            text += d.content or ""
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] += (tc.function.name or "") if tc.function else ""
                call["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    return text, calls, finish, usage


def test_streamed_and_plain_answers_agree(client):
    model = model_id(client)
    plain = client.chat.completions.create(model=model, messages=ASK, temperature=0, seed=7)
    assert plain.choices[0].message.content == TOOL_ANSWER  # no tools offered: the text as written
    assert plain.choices[0].finish_reason == "stop"
    text, calls, finish, usage = collect(
        client.chat.completions.create(model=model, messages=ASK, temperature=0, seed=7, stream=True)
    )
    assert (text, calls, finish, usage) == (TOOL_ANSWER, {}, "stop", None)


def test_sampled_answers_repeat_with_the_seed(client):
    model = model_id(client)
    runs = [client.chat.completions.create(model=model, messages=ASK, temperature=1.0, seed=3, n=3) for _ in range(2)]
    texts = [[c.message.content for c in r.choices] for r in runs]
    assert texts[0] == texts[1] and [c.index for c in runs[0].choices] == [0, 1, 2]
    streamed, _, _, _ = collect(
        client.chat.completions.create(model=model, messages=ASK, temperature=1.0, seed=3, stream=True)
    )
    assert streamed == texts[0][0]  # n=1 with the same seed: the first of the n samples


def test_tool_calls_round_trip_plain_and_streamed(client):
    model = model_id(client)
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    text, calls, finish, _ = collect(
        client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, temperature=0, stream=True)
    )
    assert text == "" and finish == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    # the call and its result go back in the conversation, as a client's agent loop sends them
    history = ASK + [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    again = client.chat.completions.create(model=model, messages=history, tools=TOOLS, temperature=0)
    assert again.choices[0].message.tool_calls[0].function.name == "get_weather"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_choice_starts_a_call(client, choice):
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0
    )
    call = r.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})


def test_tool_choice_none_leaves_the_text(client):
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, tools=TOOLS, tool_choice="none", temperature=0
    )
    assert r.choices[0].message.content == TOOL_ANSWER and r.choices[0].message.tool_calls is None


def test_usage_plain_and_in_the_last_chunk(client):
    model = model_id(client)
    plain = client.chat.completions.create(model=model, messages=ASK, temperature=0)
    assert plain.usage.completion_tokens == len(TOOL_PIECES) + 1  # the pieces and eos
    chunks = list(
        client.chat.completions.create(
            model=model, messages=ASK, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
    assert all(c.usage is None for c in chunks[:-1])


def test_stop_strings_cut_the_text(client):
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, temperature=0, stop=[' "Paris"', "nowhere"]
    )
    assert r.choices[0].message.content == '<tool_call>{"name": "get_weather", "arguments": {"city":'
    assert r.choices[0].finish_reason == "stop"
    text, _, finish, _ = collect(
        client.chat.completions.create(
            model=model_id(client), messages=ASK, temperature=0, stop=[' "Paris"'], stream=True
        )
    )
    assert text == r.choices[0].message.content and finish == "stop"


def test_length_finish(client):
    r = client.chat.completions.create(model=model_id(client), messages=ASK, temperature=0, max_tokens=2)
    assert r.choices[0].message.content == "".join(TOOL_PIECES[:2]) and r.choices[0].finish_reason == "length"


def test_logprobs_and_top_logprobs(client):
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, temperature=0, logprobs=True, top_logprobs=2
    )
    entries = r.choices[0].logprobs.content
    assert [e.token for e in entries] == TOOL_PIECES  # eos is not content
    for e in entries:
        assert e.logprob == pytest.approx(STEP_LOGPROB, abs=2e-3)
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert e.top_logprobs[1].logprob == pytest.approx(STEP_LOGPROB - LOGIT, abs=0.05)
    chunks = list(
        client.chat.completions.create(model=model_id(client), messages=ASK, temperature=0, logprobs=True, stream=True)
    )
    streamed = [e.token for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    assert streamed == TOOL_PIECES


def test_text_completions(client):
    r = client.completions.create(model=model_id(client), prompt="anything", temperature=0, logprobs=1)
    assert r.choices[0].text == TOOL_ANSWER
    assert r.choices[0].logprobs.tokens[:2] == TOOL_PIECES[:2]
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=model_id(client), prompt="anything", temperature=0, stream=True)
        if c.choices
    )
    assert streamed == TOOL_ANSWER


def test_errors_have_openai_shape(client, server):
    url, secret, _ = server
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=ASK)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id(client), messages=ASK, temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:  # 500 prompt tokens + 100: over the 512 context
        client.chat.completions.create(
            model=model_id(client), messages=[{"role": "user", "content": "x" * 500}], max_tokens=100
        )
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_id(client), messages=ASK, stop=["a", "b", "c", "d", "e"])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="tmp-wrong", max_retries=0).models.list()
    r = httpx.post(url + "/v1/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_models_health_metrics(client, server):
    url, _, _ = server
    ids = [m.id for m in client.models.list().data]
    assert len(ids) == 1 and ids[0].endswith("tool")
    assert httpx.get(url + "/health").json()["status"] == "ok"
    metrics = httpx.get(url + "/metrics").text
    assert 'tempering_requests_total{endpoint="/v1/chat/completions",status="200"}' in metrics


def test_concurrent_requests_share_one_running_batch_and_answer_as_alone(client, server):
    """Continuous batching behind the API: 8 concurrent streams join one running batch (the
    engine decoded more than one sequence in a step) and each answer equals the lone answer."""
    from concurrent.futures import ThreadPoolExecutor

    _, _, app = server
    model = model_id(client)
    alone = client.chat.completions.create(model=model, messages=ASK, temperature=0).choices[0].message.content

    def ask(i: int) -> str:
        stream = client.chat.completions.create(model=model, messages=ASK, temperature=0, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    engines = [s.engine for s in app.state.models._loaded.values()]
    for _ in range(3):  # a short answer may finish before the next arrives: overlap is likely, not certain
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(8)))
        assert answers == [alone] * 8
        if max(e.peak_running for e in engines) >= 2:
            break
    assert max(e.peak_running for e in engines) >= 2


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_follow_the_tool_schema(client, choice):
    """Constrained decoding: the model would write "Paris"; the schema allows only Oslo or Rome."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"enum": ["Oslo", "Rome"]}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, tools=tools, tool_choice=choice, temperature=0
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Oslo", "Rome")


def test_response_format_json_schema_constrains_the_answer(client):
    import jsonschema

    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"enum": [1, 2]}},
        "required": ["answer", "n"],
        "additionalProperties": False,
    }
    for stream in (False, True):
        ask = dict(
            model=model_id(client),
            messages=ASK,
            temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        )
        if stream:
            text = "".join(
                c.choices[0].delta.content or ""
                for c in client.chat.completions.create(**ask, stream=True)
                if c.choices
            )
        else:
            text = client.chat.completions.create(**ask).choices[0].message.content
        jsonschema.validate(json.loads(text), schema)  # the model alone answers a tool call, not this
    # json_object: any object. This model never closes a free string (its greedy choice among the
    # allowed characters is the lowest id), so the answer runs to max_tokens -- inside JSON text
    r = client.chat.completions.create(
        model=model_id(client), messages=ASK, temperature=0, max_tokens=8, response_format={"type": "json_object"}
    )
    assert r.choices[0].message.content.startswith('{"') and r.choices[0].finish_reason == "length"


def test_a_schema_that_cannot_constrain_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=model_id(client),
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "object", "minProperties": "x"}},
            },
        )
    assert "cannot constrain the answer" in str(err.value)
