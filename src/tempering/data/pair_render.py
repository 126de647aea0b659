"""Token-exact rendering of preference pairs: one prompt, two completions.

For a pair, the prompt is rendered once with the generation prompt
(`render(prompt, add_generation_prompt=True)`), and each side as the full conversation
prompt + answer through the same renderer SFT uses (`render.render_with_mask`). Then:

    ids(render(prompt + side)) == prompt_ids + side_ids          for side in chosen, rejected

holds by construction and is *checked*: the prompt's tokens must be a token prefix of both
full renders, so the two sides share exactly the same prompt ids (no re-tokenised
boundary, no second default system prompt, no extra EOS: the completion ids are what the
full render has after the prompt, nothing added). A template or tokenizer that breaks the
property is a `TemplateError` naming the pair, never a silently different prompt.

The score mask marks the answer's assistant tokens (text, tool-call text, end-of-turn
token), as the SFT loss mask does; tool results inside a multi-turn answer and template
glue after the last end-of-turn token are context, not scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tempering.data.io import LoadResult, where
from tempering.data.preference import PreferencePair, Side
from tempering.data.render import (
    IGNORE,
    TemplateError,
    ToolCallStyle,
    _apply,
    _encode,
    prepare_messages,
    render_with_mask,
)


@dataclass
class RenderedPair:
    """A pair as token ids: the shared prompt, then each side's completion and score mask."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    chosen_mask: list[int]
    """1 on the chosen completion's assistant tokens (what its log-prob sums over)."""
    rejected_ids: list[int]
    rejected_mask: list[int]
    weight: float = 1.0
    """The pair's loss weight (from the row)."""

    def ids(self, side: Side) -> list[int]:
        """Completion ids of one side."""
        return self.chosen_ids if side == "chosen" else self.rejected_ids

    def mask(self, side: Side) -> list[int]:
        return self.chosen_mask if side == "chosen" else self.rejected_mask

    @property
    def length(self) -> int:
        """The longer side's full length in tokens (what `max_length` bounds)."""
        return len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))

    @property
    def n_tokens(self) -> int:
        """Tokens one shared-prompt forward runs: the prompt once, both completions."""
        return len(self.prompt_ids) + len(self.chosen_ids) + len(self.rejected_ids)


def render_prompt(tokenizer: Any, messages: list[dict], style: ToolCallStyle) -> list[int]:
    """Token ids of a prompt followed by the template's generation prompt (the assistant header)."""
    return _encode(tokenizer, _apply(tokenizer, prepare_messages(messages, style), add_generation_prompt=True))


def render_pair(
    tokenizer: Any, pair: PreferencePair, style: ToolCallStyle, end_of_turn_id: int | None = None
) -> RenderedPair:
    """Render both sides of a pair over one shared prompt (see the module docstring).

    Raises:
        TemplateError: a side's full render does not start with the prompt's tokens, or a
            side has no scored token.
    """
    prompt_ids = render_prompt(tokenizer, pair.prompt_messages(), style)
    n = len(prompt_ids)
    sides: dict[str, tuple[list[int], list[int]]] = {}
    for side in ("chosen", "rejected"):
        ex = render_with_mask(tokenizer, pair.conversation(side), style, end_of_turn_id)
        if ex.input_ids[:n] != prompt_ids:
            at = next(
                (k for k, (a, b) in enumerate(zip(prompt_ids, ex.input_ids)) if a != b), min(n, len(ex.input_ids))
            )
            raise TemplateError(
                f"{side}: the prompt's tokens are not a prefix of the full render (they differ "
                f"at token {at}); the template renders the prompt differently once an answer follows"
            )
        mask = [int(label != IGNORE) for label in ex.labels[n:]]
        if not any(mask):
            raise TemplateError(f"{side}: the answer renders to no assistant tokens")
        sides[side] = (ex.input_ids[n:], mask)
    return RenderedPair(prompt_ids, *sides["chosen"], *sides["rejected"], weight=pair.weight)


def render_pairs(loaded: LoadResult, tokenizer: Any, style: ToolCallStyle, max_length: int) -> list[RenderedPair]:
    """Render validated pairs; over-long pairs (longer side) join `loaded.errors`, never cut.

    Raises:
        TemplateError: naming the file and line of the pair the template cannot render exactly.
    """
    out = []
    for rec in list(loaded.records):
        try:
            rendered = render_pair(tokenizer, rec.value, style)
        except TemplateError as exc:
            raise TemplateError(f"{where(rec.source, rec.location)}: {exc}") from None
        if rendered.length > max_length:
            loaded.reject(rec, f"over max length: {rendered.length} tokens > {max_length}", rec.value.to_row())
            continue
        out.append(rendered)
    return out
