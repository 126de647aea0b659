"""Chat answers streamed token by token as the serving engine decodes them.

A streamed chat request with one answer (n = 1), no tools and no `top_logprobs`, to a model
whose engine is serving (`BatchingEngine.start`), is submitted with an `on_token` hook: each
sampled token becomes a chunk as soon as the engine's step records it, so the first chunk
leaves after the prefill instead of after the whole answer. Every other streamed request is
answered whole and then cut into chunks (`chat.chat_chunks`); both give the same text.

Only text that can no longer change is sent (`sendable`): not a character split across
tokens, not trailing whitespace (a detokenizer may fold it into the next token), not a tail
that could be the start of a stop string, never anything from a stop string on. When the
answer completes, whatever its final text (`Completion.text`, cut at the stop string) has
beyond what was sent goes out, then the finish chunk.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, AsyncGenerator, Callable

from tempering.serve.backend import Served
from tempering.serve.chat import Prepared, _logprob_entry, _skip_ids, timeout_message, usage_chunk
from tempering.serve.protocol import ApiError, ChatCompletionRequest


def streams_live(served: Served, req: ChatCompletionRequest, prepared: Prepared) -> bool:
    """Whether this streamed request can go out token by token (else it is answered whole)."""
    return (
        bool(getattr(served.engine, "serving", False))
        and not prepared.tools_active
        and len(prepared.prompts) == 1
        and prepared.params.n == 1
        and not prepared.params.top_logprobs
    )


def sendable(text: str, stop: tuple[str, ...]) -> str:
    """The part of decoded `text` that later tokens cannot change or cut."""
    hits = [text.find(s) for s in stop if s in text]
    if hits:
        return text[: min(hits)]
    hold = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    text = text[: len(text) - hold]
    return text.rstrip("\ufffd").rstrip()


async def chat_stream(
    served: Served,
    req: ChatCompletionRequest,
    prepared: Prepared,
    response_id: str,
    model_name: str,
    finished: Callable[[list[list[Any]]], None],
    timeout_s: float,
) -> AsyncGenerator[dict[str, Any], None]:
    """The chunks of one answer as the engine decodes it; `finished(groups)` is called with the
    completion before the finish chunk is sent (the caller audits there). No token within
    `timeout_s`: an error event in OpenAI's stream shape (the client raises it) ends the stream,
    and the decoding stops."""
    from tempering.rollout.engine import prompt_seed

    loop, queue, left = asyncio.get_running_loop(), asyncio.Queue(), threading.Event()
    params = prepared.params.model_copy(update={"seed": prompt_seed(prepared.params.seed, 0)})
    future = served.engine.submit(
        prepared.prompts[0],
        params,
        on_token=lambda _s, tok, lp: loop.call_soon_threadsafe(queue.put_nowait, (tok, lp)),
        cancelled=left.is_set,  # set when this generator closes: a client gone stops its decoding
    )
    future.add_done_callback(lambda _f: loop.call_soon_threadsafe(queue.put_nowait, None))
    skip, created, tokenizer = _skip_ids(served), int(time.time()), served.tokenizer
    with_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(delta: dict, finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        out = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_name,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}],
        }
        return {**out, "usage": None} if with_usage else out

    try:
        yield chunk({"role": "assistant", "content": ""})
        kept: list[int] = []
        sent = ""
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout_s)
            except TimeoutError:
                yield ApiError(504, timeout_message(timeout_s), "timeout").body()
                return
            if item is None:
                break
            token, logprob = item
            if token in skip:
                continue
            kept.append(token)
            now = sendable(tokenizer.decode(kept, skip_special_tokens=False), params.stop)
            piece = now[len(sent) :] if now.startswith(sent) else ""
            sent += piece
            entry = {"content": [_logprob_entry(tokenizer, token, logprob, None)]} if req.logprobs else None
            yield chunk({"content": piece}, logprobs=entry)
        groups = [future.result()]
        completion = groups[0][0]
        finished(groups)
        rest = completion.text[len(sent) :] if completion.text.startswith(sent) else ""
        if rest:
            yield chunk({"content": rest})
        yield chunk({}, completion.finish_reason)
        if with_usage:
            yield usage_chunk(response_id, created, model_name, prepared, groups)
    finally:
        left.set()  # normal end: a no-op; the client left (GeneratorExit): the engine frees the slot
