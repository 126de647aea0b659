"""Token capture (`ServeConfig.capture_tokens`): served answers kept token-exact, so a black-box
agent harness talking OpenAI chat to `temper serve` produces episodes the agent trainer can use.

Each answer's audit row keeps the prompt ids the engine read and, per choice, the ids it
sampled with their log-probs (`tokens`). A chat answer is also indexed by its *turn hash*:
the request's messages and tools plus the answer as the client will send it back.

Token-in/token-out across turns, as agent episodes are built (agents/render.py): when a chat
request's history ends in an assistant turn this key was served (same messages, same tools,
same answer), the prompt is not re-rendered from text. It is that turn's prompt ids + the ids
the engine sampled + `AgentRenderer.observation_ids` of the messages after it (their turn
glue and the next assistant header). The model reads its own tokens, never a re-tokenisation
of their text, and the turn records which one it continued (`continues`). A history that
matches no captured turn starts a new episode, rendered from its text as usual.

`episode_rows` (`temper feedback export --trajectories`) walks those links back from every
last turn: one `Trajectory` per episode, loss mask 1 exactly on the sampled ids.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tempering.serve.protocol import ApiError, ChatCompletionRequest


@dataclass(frozen=True)
class Continued:
    """A chat turn spliced onto a captured one: the prompt ids and the turn it continues."""

    prompt_ids: list[int]
    response_id: str
    choice: int


def _message(role: str, content: str, calls: list[tuple[str, Any]]) -> dict[str, Any]:
    return {"role": "system" if role == "developer" else role, "content": content, "calls": calls}


def request_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The request's messages in the form turn hashes are taken over (text content, parsed calls)."""
    return [
        _message(m.role, m.text(), [(c.function.name, c.function.parsed_arguments()) for c in m.tool_calls or []])
        for m in req.messages
    ]


def answer_message(message: dict[str, Any]) -> dict[str, Any]:
    """A served choice's `message` as the client sends it back in its next request."""
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]
    return _message("assistant", message.get("content") or "", calls)


def turn_hash(req: ChatCompletionRequest, messages: list[dict[str, Any]]) -> str:
    """sha256 of a conversation (as `request_messages` writes it) under the request's tools."""
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    text = json.dumps({"messages": messages, "tools": tools}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def served_turn_hashes(req: ChatCompletionRequest, body: dict[str, Any]) -> list[str]:
    """One turn hash per choice of a chat answer: the request's messages followed by that choice."""
    asked = request_messages(req)
    return [turn_hash(req, asked + [answer_message(c["message"])]) for c in body["choices"]]


def continuation(store: Any, key_id: str, req: ChatCompletionRequest, served: Any, prefill_ids: list[int]) -> Any:
    """The token-exact prompt of a chat request whose history continues a turn `key_id` was
    served (see the module docstring), or None when it continues none."""
    from tempering.agents.render import AgentRenderer

    messages = request_messages(req)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None or last == len(messages) - 1:
        return None
    found = store.captured_turn(key_id, turn_hash(req, messages[: last + 1]))
    if found is None:
        return None
    response_id, choice, tokens = found
    turn = tokens["choices"][choice]
    sampled = turn["completion_ids"]
    renderer = AgentRenderer(served.tokenizer)
    after = [{"role": m["role"], "content": m["content"]} for m in messages[last + 1 :]]
    closed = bool(sampled) and sampled[-1] == renderer.eot_id
    ids = tokens["prompts"][turn["prompt_index"]] + sampled + renderer.observation_ids(after, closed) + prefill_ids
    return Continued(ids, response_id, choice)


def check_room(ids: list[int], max_new: int, max_context: int) -> None:
    """A 400 when a spliced prompt and its answer do not fit the model's context."""
    if len(ids) + max_new > max_context:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_context} tokens. However, you requested "
            f"{len(ids) + max_new} tokens ({len(ids)} in the conversation so far, {max_new} in the completion).",
            "context_length_exceeded",
            "messages",
        )


def captured_tokens(prompts: list[list[int]], groups: list[list[Any]], continued: Continued | None) -> dict:
    """What an audit row keeps of an answer: the prompt ids the engine read, each choice's
    prompt, sampled ids, log-probs and finish reason, and the turn it continued."""
    return {
        "prompts": [list(p) for p in prompts],
        "choices": [
            {
                "prompt_index": i,
                "completion_ids": list(c.token_ids),
                "logprobs": list(c.logprobs),
                "finish_reason": c.finish_reason,
            }
            for i, g in enumerate(groups)
            for c in g
        ],
        "continues": {"response_id": continued.response_id, "choice": continued.choice} if continued else None,
    }
