"""What `temper feedback export` and `temper arena export` write: the rows the pipeline's
`feedback` stage reads (recipes/feedback.py: `served` rows and `votes` pairs).

A feedback row carries the request and answer only when the deployment kept them
(`log_text`); rows without them cannot teach anything and are counted as skipped.
"""

from __future__ import annotations

from typing import Any

from tempering.data.toolcalls import append_tool_calls
from tempering.serve.store import Store


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenAI messages in Tempering's form (text content, calls as {name, arguments})."""
    import json

    out = []
    for m in request["messages"]:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        msg: dict[str, Any] = {"role": "system" if m["role"] == "developer" else m["role"], "content": content or ""}
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in m["tool_calls"]
            ]
        out.append(msg)
    return out


def _answer(choice: dict[str, Any]) -> str:
    import json

    if "text" in choice:
        return choice["text"]
    message = choice["message"]
    calls = [
        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
        for c in message.get("tool_calls") or []
    ]
    return append_tool_calls(message.get("content"), calls) if calls else message.get("content") or ""


def feedback_rows(store: Store) -> tuple[list[dict[str, Any]], int]:
    """(rows for the feedback stage, feedback skipped for lack of stored text)."""
    rows, skipped = [], 0
    for f in store.feedback_with_responses():
        if not f.get("request") or not f.get("response"):
            skipped += 1
            continue
        request = f["request"]
        prompt = (
            {"messages": _messages(request)}
            if "messages" in request
            else {"prompt": request["prompt"] if isinstance(request["prompt"], str) else request["prompt"][0]}
        )
        row = {
            "id": f["id"],
            **prompt,
            "completion": _answer(f["response"][0]),
            "kind": f["kind"],
            "release": f["model"],
            "request_id": f["response_id"],
            "created_at": f["created_at"],
        }
        for k in ("correction", "comment", "task"):
            if f.get(k):
                row[k] = f[k]
        rows.append(row)
    return rows, skipped
