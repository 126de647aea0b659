"""OpenAI request bodies (pydantic: they are also the server's OpenAPI schema) and its error shape.

Unknown fields are refused (400, naming the field), as OpenAI does; fields we accept but
cannot honour (penalties, logit_bias) are refused when set to anything but their neutral value,
never silently ignored.

Every body passes one check before its fields are read (`_Body`): no JSON value nested deeper
than MAX_JSON_DEPTH (the tool-call `arguments` string is parsed and held to it too) and no
string that is not valid Unicode (a lone surrogate escape such as "\\ud800" is valid JSON but
cannot be tokenized, stored or echoed back). So code behind the protocol never meets a
value that makes a recursive walk, the tokenizer or SQLite fail: such a body is a 400.
What it does not bound: sizes (the gate caps the body's bytes, `ServeConfig.max_body_bytes`)
and work (the context length and `max_sequences` bound that, in the server).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tempering.numbers import is_bare_number

MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and arrays a request may hold (a JSON schema of tool
parameters rarely goes past 10)."""


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    TYPES = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        405: "invalid_request_error",
        409: "invalid_request_error",
        413: "invalid_request_error",
        422: "invalid_request_error",
        429: "rate_limit_error",
        503: "server_error",
        504: "timeout",
    }

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        message, param = _printable(message), None if param is None else _printable(param)
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def check_json(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ValueError if `value` (parsed JSON) nests deeper than `max_depth` or holds a string
    (or key) that is not valid Unicode. Iterative, so no depth can make it recurse."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string is not valid Unicode (a lone surrogate escape)") from None
        elif isinstance(item, (dict, list)):
            if depth >= max_depth:
                raise ValueError(f"JSON nested deeper than {max_depth} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _printable(text: str) -> str:
    """`text` with anything UTF-8 cannot carry escaped: an error may echo the client's input."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Body(_Strict):
    """A request body: checked whole (depth, Unicode) before any field is validated."""

    @model_validator(mode="before")
    @classmethod
    def _sane(cls, data: Any) -> Any:
        check_json(data)
        return data


class FunctionCall(_Strict):
    name: str
    arguments: str = "{}"

    @model_validator(mode="after")
    def _arguments_object(self) -> FunctionCall:
        self.parsed_arguments()
        return self

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object; ValueError when they are not one (or nest too deep)."""
        try:
            value = json.loads(self.arguments)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"tool call arguments are not JSON: {getattr(exc, 'msg', 'nested too deep')}") from None
        if not isinstance(value, dict):
            raise ValueError("tool call arguments must be a JSON object")
        check_json(value)
        return value


class ToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ImageURL(_Strict):
    url: str = Field(min_length=1)
    """A `data:image/...;base64,` URL (remote URLs are refused: the server fetches nothing)."""
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(_Strict):
    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None

    @model_validator(mode="after")
    def _fits_type(self) -> ContentPart:
        if (self.type == "text") != (self.text is not None) or (self.type == "image_url") != (
            self.image_url is not None
        ):
            raise ValueError(f"a {self.type!r} content part needs exactly its '{self.type}' field")
        return self


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content)
        return self.content or ""

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(p.type == "image_url" for p in self.content)

    def parts(self) -> list[dict[str, Any]]:
        """The content as Tempering's parts (`{"type": "text", "text"}`, `{"type": "image_url", "image_url": {"url"}}`)."""
        assert isinstance(self.content, list)
        return [
            {"type": "text", "text": p.text}
            if p.type == "text"
            else {"type": "image_url", "image_url": {"url": p.image_url.url}}  # type: ignore[union-attr]
            for p in self.content
        ]


class FunctionDef(_Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Strict):
    include_usage: bool = False


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema_object(self) -> ResponseFormat:
        schema = (self.json_schema or {}).get("schema")
        if schema is not None and not isinstance(schema, dict):
            raise ValueError("json_schema.schema must be a JSON object (a JSON Schema)")
        return self


class _Sampling(_Body):
    model: str = Field(min_length=1, max_length=1024)  # a default model is named by its path
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=16)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> _Sampling:
        stops = self.stop_list()
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop: at most 4 non-empty strings")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                raise ValueError(f"{name} is not supported by this server (leave it 0)")
        if self.logit_bias:
            raise ValueError("logit_bias is not supported by this server")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        return self

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def sequences(self) -> int:
        """Sequences this request makes the engine decode (prompts x n)."""
        return self.n


class ChatCompletionRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _tools(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not in tools")
        return self


class CompletionRequest(_Sampling):
    prompt: str | list[str] = Field(min_length=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None

    @model_validator(mode="after")
    def _prompt(self) -> CompletionRequest:
        if self.echo:
            raise ValueError("echo is not supported by this server")
        if self.suffix:
            raise ValueError("suffix is not supported by this server")
        return self

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    def sequences(self) -> int:
        return len(self.prompts()) * self.n


class FeedbackTask(_Strict):
    """What feedback may say to make its response a training task: the right answer, nothing
    else. The task's id and prompt come from the server's own record of the response and its
    verifier is chosen here (`verifier`), so a client never writes a task's id, prompt or
    verifier (a `code` verifier would run the client's tests in the trainer's sandbox)."""

    answer: str = Field(min_length=1, max_length=1000)

    def verifier(self) -> dict[str, Any]:
        """`numeric` for a bare number (122.0 equals 122), else `exact` (case and spacing aside)."""
        return {"type": "numeric" if is_bare_number(self.answer) else "exact", "answer": self.answer}


class FeedbackRequest(_Body):
    response_id: str = Field(min_length=1, max_length=200)
    kind: Literal["thumbs_up", "thumbs_down", "correction", "report"]
    correction: str | None = Field(default=None, max_length=100_000)
    comment: str | None = Field(default=None, max_length=10000)
    task: FeedbackTask | None = None
    """Optional right answer ({"answer": "4"}): the feedback stage makes the prompt a task checked against it."""

    @model_validator(mode="after")
    def _correction(self) -> FeedbackRequest:
        if (self.kind == "correction") != bool(self.correction):
            raise ValueError("kind 'correction' needs a non-empty 'correction', and only it may have one")
        return self


class BattleRequest(_Body):
    """A battle for the calling key (its annotator): a typed `prompt` makes a battle only this key sees."""

    prompt: str | None = Field(default=None, min_length=1, max_length=4000)
    image: str | None = Field(default=None, min_length=1, max_length=4_000_000)
    """A picture the prompt is about, as a `data:image/...;base64,` URL (needs a typed prompt)."""


class VoteRequest(_Body):
    """The calling key's one vote on a battle."""

    choice: Literal["a", "b", "tie", "both_bad"]
