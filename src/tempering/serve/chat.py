"""OpenAI chat and text completions over an `Engine`: prompts in, response objects and stream chunks out.

Streamed chat answers with one choice and no tools go out token by token as the serving engine
decodes them (`serve/live.py`); every other streamed answer is the whole completion cut into
one chunk per token (`token_pieces`). Either way a streamed and a non-streamed request with
the same seed give the same text.

Tools. A template that writes tool calls itself gets the request's tools as they are;
otherwise (SmolLM2) the tools are described in the system turn and the model is asked to
answer with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, Tempering's written
form (data/toolcalls.py), which is parsed back into OpenAI `tool_calls`. `tool_choice`:
"none" leaves the tools out; "auto" lets the model choose; "required" and a named function
start the answer with the call's opening (`<tool_call>{"name":`, through `"arguments":`
when named), and constrained decoding (`rollout/constrain.py`) keeps the rest inside the
grammar of a call: one of the tools' names, arguments valid under its JSON schema, the
closing tag. With "auto" the model may answer in text or call a tool, unconstrained: a call
that does not parse comes back as plain content with finish_reason "stop". `response_format`
json_object / json_schema asks for JSON in the system turn and constrains the answer to JSON
(an object, or valid under the given schema).

Images: `image_url` parts are checked by `serve/vision.py` before anything renders them (the
model takes images, the server's image limits, each decoded); `prepare_chat` decodes and
renders, so the server calls it in a worker thread, never on the event loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from tempering.batches import TokenIdOutOfRange
from tempering.config import SamplingParams
from tempering.data.render import ToolCallStyle, prepare_messages
from tempering.data.toolcalls import CLOSE, OPEN, parse_tool_calls
from tempering.serve.backend import Served
from tempering.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, NamedToolChoice
from tempering.serve.vision import ImageLimits, check_chat_images

TOOLS_PROMPT = (
    "You can call these tools (JSON schemas below). To call one, answer with "
    '<tool_call>{{"name": <tool name>, "arguments": <arguments object>}}</tool_call>.\n{tools}'
)
JSON_PROMPT = "Answer with one JSON object and nothing else."


@dataclass
class Prepared:
    """A request turned into engine input: prompt token ids per prompt, the sampling, a prefill."""

    prompts: list[list[int]]
    params: SamplingParams
    prefill: str = ""
    tools_active: bool = False


# ------------------------------------------------------------------ requests -> engine input
def _openai_to_messages(req: ChatCompletionRequest, style: ToolCallStyle) -> list[dict[str, Any]]:
    """The conversation in Tempering's message form, with tools and JSON instructions in the system turn."""
    messages: list[dict[str, Any]] = []
    for m in req.messages:
        role = "system" if m.role == "developer" else m.role
        msg: dict[str, Any] = {"role": role, "content": m.parts() if m.has_images() else m.text()}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"name": c.function.name, "arguments": c.function.parsed_arguments()} for c in m.tool_calls
            ]
        messages.append(msg)
    extra = []
    if req.tools and req.tool_choice != "none":
        tools = req.tools
        if isinstance(req.tool_choice, NamedToolChoice):
            tools = [t for t in tools if t.function.name == req.tool_choice.function.name]
        extra.append(
            TOOLS_PROMPT.format(tools="\n".join(json.dumps(t.function.model_dump(exclude_none=True)) for t in tools))
        )
    if req.response_format is not None and req.response_format.type != "text":
        extra.append(JSON_PROMPT)
    if extra:
        if messages[0]["role"] == "system":
            messages[0] = {**messages[0], "content": "\n\n".join([messages[0]["content"], *extra])}
        else:
            messages.insert(0, {"role": "system", "content": "\n\n".join(extra)})
    return prepare_messages(messages, style)


def _params(req: Any, prompt_lens: Sequence[int], served: Served, limit: int, top_logprobs: int) -> SamplingParams:
    """Sampling settings of a request; a 400 when the prompt and the answer cannot fit the context."""
    asked = getattr(req, "max_completion_tokens", None) or req.max_tokens
    if asked is not None and asked > limit:
        raise ApiError(
            400, f"max_tokens {asked} is more than this server allows ({limit})", "invalid_value", "max_tokens"
        )
    longest = max(prompt_lens)
    room = served.max_context - longest
    max_new = asked if asked is not None else min(limit, room)
    if longest + max_new > served.max_context:
        raise ApiError(
            400,
            f"This model's maximum context length is {served.max_context} tokens. However, you "
            f"requested {longest + max_new} tokens ({longest} in the messages, {max_new} in the "
            "completion). Please reduce the length of the messages or completion.",
            "context_length_exceeded",
            "messages",
        )
    budget = getattr(served.engine, "max_cache_tokens", None)
    if budget is not None and req.n * (longest + max_new) > budget:
        raise ApiError(
            400,
            f"n={req.n} answers of {longest + max_new} tokens ({longest} in the messages, {max_new} in the "
            f"completion) need {req.n * (longest + max_new)} KV cache positions; this server holds at most "
            f"{budget} per request. Please reduce n, the messages or max_tokens.",
            "context_length_exceeded",
            "n",
        )
    return SamplingParams(
        temperature=req.temperature,
        top_p=req.top_p,
        max_new_tokens=max_new,
        stop=tuple(req.stop_list()),
        n=req.n,
        seed=req.seed,
        top_logprobs=top_logprobs,
    )


def _grammar(served: Served, req: ChatCompletionRequest, tools_active: bool) -> str | None:
    """The grammar the answer must follow (constrained decoding), or None: a forced tool call's
    continuation after its prefill (the named tool's arguments, or one of the tools), or the
    JSON `response_format` asks for. A schema that does not compile is a 400."""
    from tempering.rollout.constrain import Constraint, ConstraintError, json_schema_grammar, json_value, lark_grammar

    def args(tool: Any) -> str:
        return json_value(tool.function.parameters or {"type": "object"})

    grammar = None
    close = json.dumps("}" + CLOSE)
    tools = req.tools or []  # tools_active: there are some
    if tools_active and isinstance(req.tool_choice, NamedToolChoice):
        (tool,) = [t for t in tools if t.function.name == req.tool_choice.function.name] or [None]
        if tool is None:
            raise ApiError(
                400,
                f"tool_choice names {req.tool_choice.function.name!r}, which is not among the tools",
                "invalid_value",
                "tool_choice",
            )
        grammar = lark_grammar(f'start: " " {args(tool)} {close}')
    elif tools_active and req.tool_choice == "required":
        options = " | ".join(
            f"{json.dumps(' ' + json.dumps(t.function.name) + ', ' + json.dumps('arguments') + ': ')} {args(t)} {close}"
            for t in tools
        )
        grammar = lark_grammar(f"start: {options}")
    elif not tools_active and req.response_format is not None and req.response_format.type != "text":
        schema = (
            (req.response_format.json_schema or {}).get("schema") if req.response_format.type == "json_schema" else None
        )
        grammar = json_schema_grammar(schema or {"type": "object"})
    if grammar is not None:
        try:
            Constraint(served.tokenizer, grammar)
        except (ConstraintError, ValueError) as exc:
            raise ApiError(400, f"cannot constrain the answer: {exc}", "invalid_value", "response_format") from None
    return grammar


def prepare_chat(served: Served, req: ChatCompletionRequest, limit: int, images: ImageLimits) -> Prepared:
    """A chat request as engine input; its images checked first (`serve/vision.py`). Decodes
    images and renders the prompt: call it off the event loop."""
    check_chat_images(served, req, images)
    tools_active = bool(req.tools) and req.tool_choice != "none"
    prefill = ""
    if tools_active and req.tool_choice == "required":
        prefill = OPEN + '{"name":'
    elif tools_active and isinstance(req.tool_choice, NamedToolChoice):
        prefill = OPEN + json.dumps({"name": req.tool_choice.function.name})[:-1] + ', "arguments":'
    messages = _openai_to_messages(req, served.tool_style)
    ids = served.engine.chat_prompt(messages)
    if prefill:
        ids = ids + served.tokenizer.encode(prefill, add_special_tokens=False)
    top = (req.top_logprobs or 0) if req.logprobs else 0
    params = _params(req, [len(ids)], served, limit, top)
    grammar = _grammar(served, req, tools_active)
    return Prepared([ids], params.model_copy(update={"grammar": grammar}), prefill, tools_active)


def prepare_text(served: Served, req: CompletionRequest, limit: int) -> Prepared:
    prompts = [served.tokenizer.encode(p, add_special_tokens=True) for p in req.prompts()]
    if any(not p for p in prompts):
        raise ApiError(400, "the prompt encodes to no tokens", "invalid_value", "prompt")
    return Prepared(prompts, _params(req, [len(p) for p in prompts], served, limit, req.logprobs or 0))


def check_prompt_ids(served: Served, prepared: Prepared) -> None:
    """A 400 for a prompt with a token id outside the model's embedding, before the engine takes it
    (text may encode to one where the tokenizer is longer than the embedding; on CUDA such an id
    would assert on the device and take every request down with it). The engine's own check
    (`HFEngine.check_prompts`, `batches.check_token_ids`); an engine without one checks in itself."""
    check = getattr(served.engine, "check_prompts", None)
    if check is None:
        return
    try:
        check(prepared.prompts)
    except TokenIdOutOfRange as exc:
        raise ApiError(400, str(exc), "invalid_value", "prompt") from None


def generate(served: Served, prepared: Prepared, timeout_s: float) -> list[list[Any]]:
    """Run the engine; completions grouped per prompt. A serving batching engine takes the
    prompts into its running batch (other requests decode alongside); any other engine
    answers one request at a time.

    Raises:
        ApiError: 504 when the serving engine has not answered within `timeout_s` (the request's
            decoding is stopped: its slots go back).
    """
    import concurrent.futures
    import threading

    from tempering.rollout.engine import prompt_seed

    engine, params = served.engine, prepared.params
    if getattr(engine, "serving", False):
        gone = threading.Event()
        futures = [
            engine.submit(p, params.model_copy(update={"seed": prompt_seed(params.seed, i)}), cancelled=gone.is_set)
            for i, p in enumerate(prepared.prompts)
        ]
        _, pending = concurrent.futures.wait(futures, timeout=timeout_s)
        if pending:
            gone.set()
            raise ApiError(504, timeout_message(timeout_s), "timeout")
        return [f.result() for f in futures]
    with served.lock:
        return engine.generate(prepared.prompts, params)


def timeout_message(timeout_s: float) -> str:
    return f"the engine gave no answer within {timeout_s:g} s (request_timeout_s); the request was stopped"


# ------------------------------------------------------------------ completions -> responses
def _skip_ids(served: Served) -> set[int]:
    eos = served.tokenizer.eos_token_id
    return {eos} if eos is not None else set()


def token_pieces(tokenizer: Any, token_ids: Sequence[int], text: str, skip: set[int]) -> list[str]:
    """`text` cut into one piece per token (empty where a token ends mid-character or past a
    stop string); the pieces join to exactly `text`."""
    pieces, done, kept = [], 0, []
    for t in token_ids:
        if t not in skip:
            kept.append(t)
        prefix = tokenizer.decode(kept, skip_special_tokens=False)
        if prefix.startswith(text):
            end = len(text)
        elif text.startswith(prefix):
            end = len(prefix)
        else:  # a split multi-byte character: wait for the next token
            end = done
        pieces.append(text[done : max(done, end)])
        done = max(done, end)
    if pieces:
        pieces[-1] += text[done:]
    return pieces or [text]


def _logprob_entry(tokenizer: Any, token: int, logprob: float, top: Sequence[tuple[int, float]] | None) -> dict:
    text = tokenizer.decode([token], skip_special_tokens=False)
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": (s := tokenizer.decode([t], skip_special_tokens=False)), "logprob": lp, "bytes": list(s.encode())}
            for t, lp in (top or [])
        ],
    }


def _chat_logprobs(served: Served, c: Any, skip: set[int]) -> list[dict]:
    tops = c.top_logprobs or [None] * len(c.token_ids)
    return [
        _logprob_entry(served.tokenizer, t, lp, top)
        for t, lp, top in zip(c.token_ids, c.logprobs, tops)
        if t not in skip
    ]


@dataclass
class Answer:
    """One chat choice, parsed: its text, tool calls (OpenAI form) and finish reason."""

    text: str
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str


def parse_answer(text: str, finish: str, tools_active: bool, call_prefix: str) -> Answer:
    if tools_active:
        parsed = parse_tool_calls(text)
        if parsed.calls and not parsed.errors:
            calls = [
                {
                    "id": f"{call_prefix}_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)},
                }
                for i, c in enumerate(parsed.calls)
            ]
            return Answer(text, parsed.content or None, calls, "tool_calls")
    return Answer(text, text, [], finish)


def chat_response(
    served: Served,
    req: ChatCompletionRequest,
    prepared: Prepared,
    groups: list[list[Any]],
    response_id: str,
    model_name: str,
) -> dict[str, Any]:
    skip = _skip_ids(served)
    choices = []
    for i, c in enumerate(groups[0]):
        a = parse_answer(
            prepared.prefill + c.text, c.finish_reason, prepared.tools_active, f"call_{response_id[-8:]}{i}"
        )
        message: dict[str, Any] = {"role": "assistant", "content": a.content}
        if a.tool_calls:
            message["tool_calls"] = a.tool_calls
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": a.finish_reason,
                "logprobs": {"content": _chat_logprobs(served, c, skip)} if req.logprobs else None,
            }
        )
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": choices,
        "usage": usage(prepared, groups),
        "system_fingerprint": None,
    }


def usage_chunk(
    response_id: str, created: int, model_name: str, prepared: Prepared, groups: list[list[Any]]
) -> dict[str, Any]:
    """The last chunk of a stream that asked for `stream_options.include_usage`: no choices, the usage."""
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model_name,
        "system_fingerprint": None,
        "choices": [],
        "usage": usage(prepared, groups),
    }


def usage(prepared: Prepared, groups: list[list[Any]]) -> dict[str, int]:
    prompt = sum(len(p) for p in prepared.prompts)
    completion = sum(len(c.token_ids) for g in groups for c in g)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_chunks(
    served: Served,
    req: ChatCompletionRequest,
    prepared: Prepared,
    groups: list[list[Any]],
    response_id: str,
    model_name: str,
) -> Iterator[dict[str, Any]]:
    """The stream of `chat.completion.chunk` objects of an answer (without the final [DONE])."""
    skip, created = _skip_ids(served), int(time.time())
    with_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(index: int, delta: dict, finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        out = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_name,
            "system_fingerprint": None,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}],
        }
        return {**out, "usage": None} if with_usage else out

    for i, c in enumerate(groups[0]):
        a = parse_answer(
            prepared.prefill + c.text, c.finish_reason, prepared.tools_active, f"call_{response_id[-8:]}{i}"
        )
        yield chunk(i, {"role": "assistant", "content": ""})
        if a.tool_calls:
            if a.content:
                yield chunk(i, {"content": a.content})
            for k, call in enumerate(a.tool_calls):
                yield chunk(
                    i,
                    {
                        "tool_calls": [
                            {
                                "index": k,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["function"]["name"], "arguments": ""},
                            }
                        ]
                    },
                )
                args = call["function"]["arguments"]
                for start in range(0, len(args), 16):
                    yield chunk(i, {"tool_calls": [{"index": k, "function": {"arguments": args[start : start + 16]}}]})
        else:
            pieces = token_pieces(served.tokenizer, c.token_ids, c.text, skip)
            pieces[0] = prepared.prefill + pieces[0]
            entries = _chat_logprobs(served, c, set()) if req.logprobs else None
            for j, (t, piece) in enumerate(zip(c.token_ids, pieces)):
                if t in skip and not piece:
                    continue
                yield chunk(i, {"content": piece}, logprobs={"content": [entries[j]]} if entries else None)
        yield chunk(i, {}, a.finish_reason)
    if with_usage:
        yield usage_chunk(response_id, created, model_name, prepared, groups)


# ------------------------------------------------------------------ text completions
def _text_logprobs(served: Served, c: Any) -> dict[str, Any]:
    tok = served.tokenizer
    tokens = [tok.decode([t], skip_special_tokens=False) for t in c.token_ids]
    offsets, at = [], 0
    for s in tokens:
        offsets.append(at)
        at += len(s)
    tops = c.top_logprobs or [[] for _ in c.token_ids]
    return {
        "tokens": tokens,
        "token_logprobs": list(c.logprobs),
        "text_offset": offsets,
        "top_logprobs": [{tok.decode([t], skip_special_tokens=False): lp for t, lp in top} for top in tops],
    }


def text_response(
    served: Served,
    req: CompletionRequest,
    prepared: Prepared,
    groups: list[list[Any]],
    response_id: str,
    model_name: str,
) -> dict[str, Any]:
    choices = [
        {
            "index": i,
            "text": c.text,
            "finish_reason": c.finish_reason,
            "logprobs": _text_logprobs(served, c) if req.logprobs is not None else None,
        }
        for i, c in enumerate(c for g in groups for c in g)
    ]
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": choices,
        "usage": usage(prepared, groups),
    }


def text_chunks(
    served: Served,
    req: CompletionRequest,
    prepared: Prepared,
    groups: list[list[Any]],
    response_id: str,
    model_name: str,
) -> Iterator[dict[str, Any]]:
    skip, created = _skip_ids(served), int(time.time())
    with_usage = bool(req.stream_options and req.stream_options.include_usage)
    for i, c in enumerate(c for g in groups for c in g):
        for piece in token_pieces(served.tokenizer, c.token_ids, c.text, skip):
            if piece:
                yield {
                    "id": response_id,
                    "object": "text_completion",
                    "created": created,
                    "model": model_name,
                    "choices": [{"index": i, "text": piece, "finish_reason": None, "logprobs": None}],
                }
        yield {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model_name,
            "choices": [{"index": i, "text": "", "finish_reason": c.finish_reason, "logprobs": None}],
        }
    if with_usage:
        yield {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model_name,
            "choices": [],
            "usage": usage(prepared, groups),
        }
