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


FEEDBACK_REWARD = {"thumbs_up": 1.0, "thumbs_down": 0.0}
"""The reward an episode's last answer gets from its feedback; without any it is 0, flagged `no_feedback`."""


def trajectory_rows(store: Store) -> list[dict[str, Any]]:
    """One row per served chat episode with captured tokens (serve/capture.py): the fields of a
    `tempering.types.Trajectory` (token-exact: loss mask 1 on the ids the engine sampled, their
    log-probs, their versions: `versions.SERVED`, version 0 of the turn's release) plus `releases` and `response_ids`, one per turn, and the `key` that asked.

    An episode is a chain of turns, each continuing the one before token-exactly; it ends at a
    turn no later request continued (each choice of an `n > 1` answer ends its own)."""
    from tempering.types import Reward, Trajectory
    from tempering.versions import SERVED, stamp

    rows = {r["response_id"]: r for r in store.captured() if r["endpoint"].endswith("/chat/completions")}
    continued = {(c["response_id"], c["choice"]) for r in rows.values() if (c := r["tokens"]["continues"]) is not None}
    feedback = {f["response_id"]: f["kind"] for f in store.feedback(None) if f["kind"] in FEEDBACK_REWARD}
    out = []
    for rid, row in rows.items():
        for choice in range(len(row["tokens"]["choices"])):
            if (rid, choice) in continued:
                continue
            turns = _chain(rows, rid, choice)
            token_ids, loss_mask, logprobs = _token_view(turns)
            kind = feedback.get(rid)
            reward = Reward(value=FEEDBACK_REWARD[kind], flags=[]) if kind else Reward(value=0.0, flags=["no_feedback"])
            last = row["tokens"]["choices"][choice]
            trajectory = Trajectory(
                task_id=turns[0][0]["response_id"],
                sample=choice,
                messages=_messages(row["request"])
                + [{"role": "assistant", "content": _answer(row["response"][choice])}]
                if row.get("request") and row.get("response")
                else [],
                token_ids=token_ids,
                loss_mask=loss_mask,
                logprobs=logprobs,
                versions=stamp(loss_mask, SERVED),
                prompt_length=len(turns[0][1]),
                rewards=[reward],
                finish_reason=last["finish_reason"],
            )
            meta = {
                "releases": [r["release"] for r, _, _ in turns],
                "response_ids": [r["response_id"] for r, _, _ in turns],
            }
            out.append({**trajectory.model_dump(), **meta, "key_id": row["key_id"]})
    return out


def _chain(rows: dict[str, dict[str, Any]], rid: str, choice: int) -> list[tuple[dict[str, Any], list[int], dict]]:
    """The turns of the episode ending at (`rid`, `choice`), oldest first: (audit row, prompt ids, choice)."""
    turns = []
    while True:
        row = rows[rid]
        picked = row["tokens"]["choices"][choice]
        turns.append((row, row["tokens"]["prompts"][picked["prompt_index"]], picked))
        link = row["tokens"]["continues"]
        if link is None or link["response_id"] not in rows:
            return turns[::-1]
        rid, choice = link["response_id"], link["choice"]


def _token_view(turns: list[tuple[dict[str, Any], list[int], dict]]) -> tuple[list[int], list[int], list[float]]:
    """Ids, loss mask and log-probs of a chain: the last prompt and answer, with every turn's
    sampled ids marked where they stand (each turn's prompt + answer prefixes the next prompt)."""
    _, prompt, last = turns[-1]
    token_ids = prompt + last["completion_ids"]
    loss_mask, logprobs = [0] * len(token_ids), [0.0] * len(token_ids)
    for row, p, c in turns:
        start, ids = len(p), c["completion_ids"]
        if token_ids[: start + len(ids)] != p + ids:
            raise ValueError(f"captured turn {row['response_id']} is not a prefix of the episode's tokens")
        loss_mask[start : start + len(ids)] = [1] * len(ids)
        logprobs[start : start + len(ids)] = c["logprobs"]
    return token_ids, loss_mask, logprobs
