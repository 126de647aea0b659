"""Chat template -> token ids + an exact assistant-only loss mask.

The mask is computed by rendering prefixes, never by searching strings or relying on
`{% generation %}` tags. For every assistant message i:

    start = render(messages[:i], add_generation_prompt=True)   # everything before its text
    end   = render(messages[:i + 1])                            # ... through its end of turn

Both must be string prefixes of the full render *and* their token ids must be token
prefixes of the full render's ids; then tokens [len(start), len(end)) are the assistant's.
Template glue after the end-of-turn token (SmolLM2's trailing newline) is not the
model's to predict, so the span stops at the last end-of-turn token inside it.
Any violation raises `TemplateError` naming the message and the problem: training on a
mis-aligned mask is worse than not training.

Tool calls: `detect_tool_call_style` renders a probe to learn whether the template writes
`tool_calls` itself ("template") or drops them ("tempering": we write them into the
assistant text in the documented `<tool_call>` form before templating).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tempering.data.io import LoadResult, where
from tempering.data.toolcalls import append_tool_calls, parse_tool_calls
from tempering.errors import UserError
from tempering.types import IGNORE  # re-exported: data code imports it from here

ToolCallStyle = Literal["template", "tempering"]

_PROBE_CALL = {"name": "tempering_probe_fn", "arguments": {"probe_arg": "tp-7f3a91"}}
_PROBE_TOOL_TEXT = "tempering-tool-result-5c2e"


class TemplateError(UserError):
    """The chat template cannot give a prefix-consistent rendering (or loses content)."""


@dataclass
class RenderedExample:
    """Token ids and labels (IGNORE where the loss mask is off), unshifted."""

    input_ids: list[int]
    labels: list[int]
    where: str = field(default="", compare=False)
    """The row it was rendered from (`file: line 7`), for errors about it; "" when built by hand."""

    @property
    def n_loss_tokens(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE)


def _apply(tokenizer: Any, messages: list[dict], add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def _encode(tokenizer: Any, text: str) -> list[int]:
    # Templates write their own special tokens; the tokenizer must not add more.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def detect_tool_call_style(tokenizer: Any) -> ToolCallStyle:
    """Render a probe conversation and see what the template does with a tool call.

    Returns "template" when the template writes the call in a form `parse_tool_calls`
    reads back exactly, "tempering" when it drops the call. Raises `TemplateError` when
    it writes the call in some other form (we could not parse generations) or drops the
    content of `tool` turns (tool results would be silently lost).
    """
    probe = [
        {"role": "user", "content": "probe"},
        {"role": "assistant", "content": "calling", "tool_calls": [_PROBE_CALL]},
        {"role": "tool", "content": _PROBE_TOOL_TEXT},
        {"role": "assistant", "content": "done"},
    ]
    try:
        text = _apply(tokenizer, probe)
    except Exception as exc:  # jinja raises many types; we name the template problem
        raise TemplateError(f"chat template failed on a tool-call conversation: {exc}") from exc
    if _PROBE_TOOL_TEXT not in text:
        raise TemplateError("chat template drops the content of 'tool' turns; tool results would be lost")
    if _PROBE_CALL["name"] not in text and "tp-7f3a91" not in text:
        return "tempering"
    if _PROBE_CALL not in parse_tool_calls(text).calls:
        raise TemplateError(
            "chat template renders tool calls in a form Tempering cannot parse back "
            "(expected <tool_call>{json}</tool_call>); set tool_call_style: tempering to override"
        )
    return "template"


def prepare_messages(messages: list[dict], style: ToolCallStyle) -> list[dict]:
    """Messages as the template should see them: in "tempering" style, calls become text."""
    if style == "template":
        return messages
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = m["tool_calls"]
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            m["content"] = append_tool_calls(m.get("content"), calls)
        out.append(m)
    return out


def _prefix_len(tokenizer: Any, prefix: str, full: str, full_ids: list[int], where: str) -> int:
    if not full.startswith(prefix):
        at = next((k for k, (a, b) in enumerate(zip(prefix, full)) if a != b), min(len(prefix), len(full)))
        raise TemplateError(
            f"chat template is not prefix-consistent: the render {where} is not a prefix of the "
            f"full conversation (they differ at character {at}: {prefix[at : at + 40]!r} vs {full[at : at + 40]!r})"
        )
    ids = _encode(tokenizer, prefix)
    if full_ids[: len(ids)] != ids:
        raise TemplateError(
            f"tokenization is not prefix-consistent {where}: the tokens of the prefix differ from the "
            f"full render's first {len(ids)} tokens (a token merges across the turn boundary)"
        )
    return len(ids)


def render_with_mask(
    tokenizer: Any, messages: list[dict], style: ToolCallStyle, end_of_turn_id: int | None = None
) -> RenderedExample:
    """Render one conversation and mark exactly the assistant tokens for the loss (a turn with
    `weight: 0` stays context and is not marked).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        messages: plain message dicts (`Conversation.to_dicts()`).
        style: from `detect_tool_call_style(tokenizer)`.
        end_of_turn_id: the token that ends an assistant turn (default: the tokenizer's eos).
    Raises:
        TemplateError: the template cannot be rendered prefix-consistently.
    """
    msgs = prepare_messages(messages, style)
    eot = tokenizer.eos_token_id if end_of_turn_id is None else end_of_turn_id
    full = _apply(tokenizer, msgs)
    ids = _encode(tokenizer, full)
    labels = [IGNORE] * len(ids)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or m.get("weight") == 0:  # weight 0: context, not trained on
            continue
        start_text = _apply(tokenizer, msgs[:i], add_generation_prompt=True) if i else ""
        start = _prefix_len(tokenizer, start_text, full, ids, f"before message {i}")
        end = _prefix_len(tokenizer, _apply(tokenizer, msgs[: i + 1]), full, ids, f"through message {i}")
        span = ids[start:end]
        if eot is not None and eot in span:
            end = start + len(span) - span[::-1].index(eot)
        if end <= start:
            raise TemplateError(f"assistant message {i} renders to no tokens")
        labels[start:end] = ids[start:end]
    return RenderedExample(input_ids=ids, labels=labels)


def render_records(loaded: LoadResult, tokenizer: Any, style: ToolCallStyle, max_length: int) -> list[RenderedExample]:
    """Render validated conversations; over-long rows join `loaded.errors` (never cut)."""
    out = []
    for rec in list(loaded.records):
        if any(isinstance(m.content, list) for m in rec.value.messages):
            loaded.reject(
                rec,
                "has image parts, and this model is text-only (train images on a vision model: docs/vision.md)",
                rec.value.model_dump(exclude_none=True),
            )
            continue
        try:
            ex = render_with_mask(tokenizer, rec.value.to_dicts(), style)
        except TemplateError as exc:
            raise TemplateError(f"{where(rec.source, rec.location)}: {exc}") from None
        if len(ex.input_ids) > max_length:
            loaded.reject(
                rec,
                f"over max length: {len(ex.input_ids)} tokens > {max_length}",
                rec.value.model_dump(exclude_none=True),
            )
            continue
        ex.where = where(rec.source, rec.location)
        out.append(ex)
    return out
