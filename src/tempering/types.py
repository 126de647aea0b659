"""The shared vocabulary as plain data types. No torch import here.

Only the types the landed capabilities use live here; later capabilities add theirs next
to these.
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
    content: str | list[dict[str, Any]] | None = None
    """Text, or (vision rows) a list of OpenAI content parts: `{"type": "text", "text"}` and
    `{"type": "image_url", "image_url": {"url"}}` (data/formats.py, data/images.py)."""
    tool_calls: list[ToolCall] | None = None
    # Accepted so OpenAI-shaped data loads; not rendered unless the template uses them.
    name: str | None = None
    tool_call_id: str | None = None
    weight: Literal[0, 1] | None = None
    """OpenAI fine-tuning's per-turn switch, assistant turns only: 0 keeps the turn as context and
    takes it out of the loss (an erroneous call before its recovery); absent or 1 trains on it."""

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
    def _one_prompt(self) -> Task:
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


TrajectoryStatus = Literal["scored", "verifier_error", "timeout", "env_error"]
"""`scored`: the verifier judged the sample. `verifier_error` / `timeout`: the verifier
crashed or ran out of time, so the sample has no judgement (never a model failure).
`env_error`: an agent environment (its sandbox) failed during the episode (never a model failure)."""


class Trajectory(BaseModel):
    """One sampled episode, scored: what a rollout produces and every consumer reads.

    The token view is the whole sequence, prompt first: `loss_mask` is 1 on tokens the
    model generated and `logprobs` holds their sampling log-probs (0 elsewhere), so a
    multi-turn episode (tool output between model turns) fits the same shape. Ids are
    plain lists so this type imports without torch.
    """

    model_config = ConfigDict(extra="forbid")
    task_id: str
    """The task this episode answers."""
    sample: int = 0
    """Index of this sample among those drawn for the same prompt (its group)."""
    messages: list[dict[str, Any]]
    """The conversation: the prompt's messages, then the model's turn(s)."""
    token_ids: list[int]
    """Prompt and generated tokens, in order."""
    loss_mask: list[int]
    """1 on generated tokens (trainable), 0 on prompt and environment tokens."""
    logprobs: list[float]
    """Sampling log-prob of each generated token; 0 where `loss_mask` is 0."""
    prompt_length: int = Field(ge=0)
    """Tokens before the first generated one (the prefix shared by a group)."""
    rewards: list[Reward]
    """One judgement per model turn; the last is the episode's outcome."""
    finish_reason: str = "stop"
    """How generation ended: "stop" (a stop token) or "length" (cut by the token limit)."""
    status: TrajectoryStatus = "scored"
    routing: list[list[list[int]]] | None = None
    """MoE models with router replay: per token, per layer, the experts the rollout sent it to
    (-1: none recorded)."""
    versions: list[int] | None = None
    """Per token, the policy version that sampled it (`tempering.versions`: the trainer's
    `weights_version` the source stamped, every generated token alike; -1 on prompt and
    environment tokens); None: unknown (not stamped, or written before versions were kept)."""

    @model_validator(mode="after")
    def _aligned(self) -> Trajectory:
        if not (len(self.token_ids) == len(self.loss_mask) == len(self.logprobs)):
            raise ValueError("token_ids, loss_mask and logprobs must have one entry per token")
        if self.versions is not None and len(self.versions) != len(self.token_ids):
            raise ValueError("versions must have one entry per token")
        if not self.rewards:
            raise ValueError("a trajectory needs at least one reward")
        return self

    @property
    def reward(self) -> Reward:
        """The outcome: the last turn's reward."""
        return self.rewards[-1]

    @property
    def scored(self) -> bool:
        """Whether the verifier judged it (False: verifier error or timeout)."""
        return self.status == "scored"

    @property
    def completion(self) -> str:
        """The text of the model's last turn."""
        return next((m.get("content") or "" for m in reversed(self.messages) if m["role"] == "assistant"), "")

    @property
    def completion_ids(self) -> list[int]:
        return self.token_ids[self.prompt_length :]

    @property
    def completion_logprobs(self) -> list[float]:
        return self.logprobs[self.prompt_length :]

    @property
    def completion_versions(self) -> list[int] | None:
        return None if self.versions is None else self.versions[self.prompt_length :]

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"
