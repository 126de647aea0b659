"""The shared vocabulary as plain data types. No torch import here.

Only the types the landed capabilities use live here; later capabilities add theirs
(`Task`, `Reward`, `Trajectory`, ...) next to these.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "user", "assistant", "tool"]

IGNORE = -100
"""Label of a token that carries no loss (the value torch's cross-entropy also ignores)."""


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


class Task(BaseModel):
    """A prompt plus how to verify an answer. Stable JSONL fields that outside tools rely on.

    `verifier` is a spec such as `{"type": "numeric", "answer": "122"}`; hidden material
    (tests, answers) lives only there and never in the prompt.
    """

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[Message] | None = None
    verifier: dict[str, Any]
    track: str = "general"
    difficulty: float | None = None
    source: str | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> "Task":
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a task needs exactly one of 'prompt' or 'messages'")
        if not isinstance(self.verifier.get("type"), str):
            raise ValueError("verifier needs a string 'type'")
        return self

    def chat(self) -> list[dict[str, Any]]:
        """The prompt as chat messages."""
        if self.messages is not None:
            return [m.model_dump(exclude_none=True) for m in self.messages]
        return [{"role": "user", "content": self.prompt}]


class Reward(BaseModel):
    """A verifier's judgement: the value, its named parts, and flags such as `cheat_suspected`."""

    value: float
    components: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    detail: str | None = None

    @property
    def passed(self) -> bool:
        """Correct: the `correct` component is positive if there is one, else value >= 1.
        The one rule behind GRPO's sample accuracy and the eval suites' accuracy."""
        if "correct" in self.components:
            return self.components["correct"] > 0
        return self.value >= 1.0
