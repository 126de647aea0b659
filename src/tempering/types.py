"""The shared vocabulary as plain data types. No torch import here.

Only the types the landed capabilities use live here; later capabilities add theirs
(`Task`, `Reward`, `Trajectory`, ...) next to these.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One tool call written by the assistant: `{"name": ..., "arguments": {...}}`."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One turn of a conversation in the common `messages` format."""

    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    # Accepted so OpenAI-shaped data loads; not rendered unless the template uses them.
    name: str | None = None
    tool_call_id: str | None = None

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _unwrap_openai_function(cls, value: Any) -> Any:
        # OpenAI shape {"type": "function", "function": {"name", "arguments": "<json>"}} -> ours.
        if not isinstance(value, list):
            return value
        out = []
        for call in value:
            if isinstance(call, dict):
                fn = dict(call["function"]) if isinstance(call.get("function"), dict) else dict(call)
                fn.pop("id", None), fn.pop("type", None)
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
                call = fn
            out.append(call)
        return out


class Conversation(BaseModel):
    """A list of messages; the unit of SFT data."""

    model_config = ConfigDict(extra="forbid")
    messages: list[Message] = Field(min_length=1)

    def to_dicts(self) -> list[dict[str, Any]]:
        """Messages as plain dicts, as chat templates expect them (None fields dropped)."""
        return [m.model_dump(exclude_none=True) for m in self.messages]
