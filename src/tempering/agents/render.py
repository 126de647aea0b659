"""Token pieces of an agent episode: the opening prompt, and what the environment adds between turns.

Token-in/token-out (the anchors' hardest lesson): an episode's ids are never re-rendered
from its final messages. They are built piece by piece:

    prompt_ids(messages, tools)           rendered once, up to the first assistant header
    + the engine's sampled ids            kept exactly as sampled (the only trainable tokens)
    + observation_ids(obs, closed)        the end-of-turn token if the model's turn did not end
                                          with one, the template's glue and the tool/user turns,
                                          and the next assistant header
    + the engine's sampled ids ...

`observation_ids` learns the template's form from a render: it renders a fixed
conversation with and without the observation messages and keeps the difference after the
last end-of-turn token. So a template with native tool turns (Qwen2.5/Hermes
`<tool_response>`) and SmolLM2's plain `tool` role both work unchanged.

Tools reach the model the template's way: `apply_chat_template(..., tools=schemas)` where
the template renders tool calls itself ("template" style), else a system message that
lists them and Tempering's documented `<tool_call>{json}</tool_call>` form ("tempering").
"""

from __future__ import annotations

import json
from typing import Any

from tempering.agents.tools import TOOLS
from tempering.data.render import TemplateError, ToolCallStyle, detect_tool_call_style

_BASE = [
    {"role": "user", "content": "tempering-probe-question"},
    {"role": "assistant", "content": "tempering-probe-answer"},
]


def tool_system_prompt(tools: list[str]) -> str:
    """The system message of "tempering" style: the tools and how to call them."""
    lines = [
        "You can use tools. To call one, write on its own line:",
        '<tool_call>{"name": "<tool>", "arguments": {<arguments as JSON>}}</tool_call>',
        "Tools:",
    ]
    for name in tools:
        t = TOOLS[name]
        lines.append(f"- {name} {json.dumps(list(t.parameters['properties']))}: {t.description}")
    lines.append("Give the final answer with the submit tool.")
    return "\n".join(lines)


class AgentRenderer:
    """Renders an episode's non-model tokens with one tokenizer's chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template (the engine's).
        end_of_turn_id: the token that closes an assistant turn (default: eos).
    Raises:
        TemplateError: the template drops tool results, or is not prefix-consistent.
    """

    def __init__(self, tokenizer: Any, end_of_turn_id: int | None = None):
        self.tokenizer = tokenizer
        self.style: ToolCallStyle = detect_tool_call_style(tokenizer)
        self.eot_id = tokenizer.eos_token_id if end_of_turn_id is None else end_of_turn_id
        self.eot_text = tokenizer.decode([self.eot_id])
        self._cache: dict[str, list[int]] = {}

    def _apply(self, messages: list[dict[str, Any]], tools: list[str] | None, generation: bool) -> str:
        kw = {"tools": [TOOLS[t].schema for t in tools]} if tools and self.style == "template" else {}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kw)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def opening(self, messages: list[dict[str, Any]], tools: list[str]) -> list[dict[str, Any]]:
        """The first messages as the template sees them (a tool system message in "tempering" style)."""
        if self.style == "tempering" and not any(m["role"] == "system" for m in messages):
            return [{"role": "system", "content": tool_system_prompt(tools)}, *messages]
        return list(messages)

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[str]) -> list[int]:
        """Ids of the opening conversation through the first assistant header."""
        return self._encode(self._apply(self.opening(messages, tools), tools, generation=True))

    def turn_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn written for the model (a scripted turn): the text, end-of-turn."""
        return [*self._encode(text), self.eot_id]

    def observation_ids(self, observation: list[dict[str, Any]], closed: bool) -> list[int]:
        """Ids the environment inserts after a model turn: its turn's end (when `closed` is
        False, i.e. the model stopped on a stop string), the observation, the next header."""
        head = self._apply(_BASE, None, generation=False)
        full = self._apply(_BASE + observation, None, generation=True)
        if not full.startswith(head):
            raise TemplateError("chat template is not prefix-consistent when tool results follow a turn")
        cut = head.rfind(self.eot_text)
        if cut < 0:
            raise TemplateError(f"the end-of-turn token {self.eot_text!r} does not close an assistant turn")
        ids = self._encode(full[cut + len(self.eot_text) :])
        return ids if closed else [self.eot_id, *ids]
