"""Constrained decoding: every sampled token keeps the text inside a grammar (llguidance).

    grammar = json_schema_grammar({"type": "object", ...})      # or lark_grammar("start: ...")
    engine.generate(prompts, SamplingParams(..., grammar=grammar))

A request's `SamplingParams.grammar` (an llguidance grammar, as the two helpers here write
it) gives each of its samples a `Constraint`: before sampling, the tokens that cannot
continue the grammar get -inf logits (llguidance's token bitmask over the tokenizer); after,
the sampled token advances the matcher; when the grammar is complete the sample stops.
Log-probs are those of the constrained distribution, the one actually sampled. JSON is
written compactly with `", "` and `": "` separators (no free whitespace, so greedy decoding
cannot loop on blank space), as Tempering writes tool calls.

Runs in the batching engine (the server's engine); the other engines refuse a grammar.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import torch

from tempering.errors import UserError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a typing-only name (the stub's TypedDict)

JSON_STYLE: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

__all__ = ["Constraint", "ConstraintError", "json_schema_grammar", "lark_grammar", "json_value", "unpack_bitmask"]


class ConstraintError(UserError):
    """A grammar llguidance cannot compile (the message says why)."""


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The grammar of compact JSON text valid under `schema`."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)


def json_value(schema: dict[str, Any]) -> str:
    """`schema` as a lark `%json` item (compact JSON), for use inside `lark_grammar` text."""
    return "%json " + json.dumps({**schema, "x-guidance": JSON_STYLE})


def lark_grammar(text: str) -> str:
    """The grammar of a lark text (llguidance's dialect: `%json {schema}` items, string literals)."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_lark(text)


_BIT = torch.arange(32, dtype=torch.int32)


def unpack_bitmask(words: torch.Tensor, vocab: int) -> torch.Tensor:
    """(vocab,) bool: token t is allowed when bit t % 32 of int32 word t // 32 is set (llguidance's
    layout). Eager on purpose: llguidance's own `apply_token_bitmask_inplace` is a
    `torch.compile(dynamic=True)` kernel, which torch 2.13's inductor miscompiles on AVX-512 hosts
    (wrong tokens masked, then glibc's "double free or corruption" abort), and which needs a C++
    compiler that a host may lack (models/cpu_features.py, `inductor_cpp`)."""
    return ((words[:, None] >> _BIT) & 1).view(-1)[:vocab].bool()


_TOKENIZERS: dict[int, Any] = {}


def _ll_tokenizer(tokenizer: Any) -> Any:
    """llguidance's view of an HF tokenizer (built once per tokenizer object)."""
    import llguidance.hf

    key = id(tokenizer)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = (tokenizer, llguidance.hf.from_tokenizer(tokenizer))
    return _TOKENIZERS[key][1]


class Constraint:
    """One sample's position in a grammar."""

    def __init__(self, tokenizer: Any, grammar: str):
        import llguidance
        import llguidance.torch as llt

        self._ll = _ll_tokenizer(tokenizer)
        self.matcher = llguidance.LLMatcher(self._ll, grammar, log_level=0)  # errors are read, not printed
        if self.matcher.get_error():
            raise ConstraintError(f"grammar does not compile: {self.matcher.get_error()}")
        self._mask = llt.allocate_token_bitmask(1, self._ll.vocab_size)

    @property
    def done(self) -> bool:
        """The grammar is complete (nothing may follow)."""
        return self.matcher.is_stopped()

    def restrict(self, logits: torch.Tensor) -> None:
        """Set the logits (one row, vocabulary wide) of tokens the grammar forbids to -inf, in place."""
        import llguidance.torch as llt

        llt.fill_next_token_bitmask(self.matcher, self._mask, 0)
        allowed = unpack_bitmask(self._mask[0], min(self._ll.vocab_size, logits.shape[0]))
        logits[: allowed.shape[0]].masked_fill_(~allowed, float("-inf"))
        logits[allowed.shape[0] :] = float("-inf")

    def accept(self, token: int) -> bool:
        """Advance past a sampled token (one `restrict` allowed); False when the matcher will not
        consume it. That happens for an added token llguidance counts as special (any `<...>`
        one, e.g. `</tool_call>`) which its mask allowed because the grammar's text continues
        with those bytes: the caller ends the sample there, with the token (its text is the
        grammar's)."""
        return bool(self.matcher.consume_token(token))
