"""The OpenAI-compatible server takes no token ids from a client (a `prompt` of ints is a 400), and
text that encodes to an id outside the model's embedding (a tokenizer longer than the embedding:
a token added after the model was saved) is a 400 naming the prompt, the id, its position and the
vocabulary, plain and streamed, before the engine sees it; the server answers the next request."""

from typing import Any, NamedTuple

import httpx
import pytest
from transformers import AutoTokenizer

from tests.serve.conftest import TEXT_ANSWER, TEXT_PIECES, ServerThread, chain_model

ADDED = "<|unseen|>"


@pytest.fixture(scope="module")
def longer_tokenizer_server(tmp_path_factory):
    """A server of the text model whose tokenizer has one token more than its embedding has rows."""
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    model = chain_model(TEXT_PIECES, tmp_path_factory.mktemp("served") / "text")
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = len(tokenizer)
    tokenizer.add_tokens([ADDED])
    tokenizer.save_pretrained(model)
    app = create_app(ServeConfig(state=tmp_path_factory.mktemp("state"), model=str(model)))
    _, secret = app.state.store.create_key("tester")
    thread = ServerThread(app)
    yield Served(thread.url, {"Authorization": f"Bearer {secret}"}, str(model), rows, tokenizer)
    thread.stop()


class Served(NamedTuple):
    url: str
    headers: dict
    model: str
    rows: int
    """Rows of the model's embedding: one fewer than the tokenizer's tokens."""
    tokenizer: Any


def _post(s: Served, route: str, **body) -> httpx.Response:
    body = {"model": s.model, "temperature": 0, **body}
    return httpx.post(f"{s.url}/v1/{route}", json=body, headers=s.headers, timeout=60)


def test_text_encoding_past_the_embedding_is_a_400_and_the_server_answers_on(longer_tokenizer_server):
    s = longer_tokenizer_server
    rows, tokenizer = s.rows, s.tokenizer
    prompt = "!" + tokenizer.convert_ids_to_tokens(rows - 1) + ADDED  # "!" is id 0: the first byte
    ids = tokenizer.encode(prompt, add_special_tokens=True)
    assert ids[-3:] == [0, rows - 1, rows]  # the edges of the embedding, then one past it
    for stream in (False, True):
        r = _post(s, "completions", prompt=["ok", prompt], stream=stream)
        assert r.status_code == 400, r.text[:200]
        assert r.json()["error"]["message"] == (
            f"prompt 1: token id {rows} at position {len(ids) - 1} is outside the model's vocabulary "
            f"[0, {rows}) (its input embedding has {rows} rows)"
        )
        assert r.json()["error"]["param"] == "prompt"
    chat = _post(s, "chat/completions", messages=[{"role": "user", "content": ADDED}], stream=True)
    assert chat.status_code == 400 and f"token id {rows} at position" in chat.json()["error"]["message"]
    r = _post(s, "completions", prompt="anything")
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == TEXT_ANSWER


def test_a_prompt_of_token_ids_is_refused(longer_tokenizer_server):
    s = longer_tokenizer_server
    for prompt in ([1, 2, 3], [[1, s.rows]], [-1]):
        r = _post(s, "completions", prompt=prompt)
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("prompt"), r.text[:200]
