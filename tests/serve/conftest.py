"""Tiny served models, built by hand to answer every prompt with one fixed text (so server
tests state exact outputs), and a server thread on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import torch

TOOL_PIECES = [
    "<tool_call>",
    '{"name":',
    ' "get_weather"',
    ', "arguments":',
    ' {"city":',
    ' "Paris"',
    "}}",
    "</tool_call>",
]
TEXT_PIECES = ["The", " answer", " is", " 4", "."]
TOOL_ANSWER, TEXT_ANSWER = "".join(TOOL_PIECES), "".join(TEXT_PIECES)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LOGIT = 8.0  # the next answer token's logit; every other token's is 0


def tiny_tokenizer():
    """Byte-level tokenizer (no merges: every byte is a token) with the answer pieces added as
    tokens and a ChatML template; any text encodes, and the answers encode to their pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML,
    )
    hf.add_tokens(TOOL_PIECES + TEXT_PIECES)
    return hf


def chain_model(pieces: list[str], out: Path) -> Path:
    """A hand-built Llama that answers every chat prompt with `pieces` then eos (saved with its tokenizer).

    Its one layer adds nothing (attention and MLP outputs are zero), so the last hidden state
    is the one-hot embedding of the last token and the LM head maps token -> next token: the
    generation prompt's final newline -> the first piece -> ... -> the last piece -> eos; any
    other token -> the first piece. Each step's logits are LOGIT for the next token and 0 for
    the rest, so its log-prob is -log(1 + (V - 1) * exp(-LOGIT)).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    v = len(tokenizer)
    h = v + v % 2  # RoPE needs an even head size
    cfg = LlamaConfig(
        vocab_size=v,
        hidden_size=h,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        rms_norm_eps=0.0,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    ids = [tokenizer.convert_tokens_to_ids(p) for p in pieces]
    newline = tokenizer.encode("\n", add_special_tokens=False)[-1]
    chain = dict(zip([newline] + ids, ids + [tokenizer.eos_token_id]))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.model.embed_tokens.weight.copy_(torch.eye(v, h))
        model.model.norm.weight.fill_(h**-0.5)  # RMSNorm of a one-hot row is sqrt(h) * the row
        for t in range(v):
            model.lm_head.weight[chain.get(t, ids[0]), t] = LOGIT
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """(tool-call model dir, text model dir): each answers any chat prompt with its fixed text."""
    root = tmp_path_factory.mktemp("served")
    return chain_model(TOOL_PIECES, root / "tool"), chain_model(TEXT_PIECES, root / "text")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """A uvicorn server for `app` on a free loopback port, in a thread."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tiny_models, tmp_path_factory):
    """A server of the tool-call model (no registry) with one key; yields (url, key, app)."""
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    cfg = ServeConfig(state=tmp_path_factory.mktemp("state"), model=str(tiny_models[0]), log_text=True)
    app = create_app(cfg)
    _, secret = app.state.store.create_key("tester")
    thread = ServerThread(app)
    yield thread.url, secret, app
    thread.stop()


@pytest.fixture(scope="module")
def client(server):
    import openai

    url, secret, _ = server
    return openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0, timeout=60)
