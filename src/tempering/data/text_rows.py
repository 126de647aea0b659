"""Plain-text rows for continued pre-training (`data.format: text`): `{"text": "..."}`.

Every token is trained on. A document is tokenized with the model's special tokens, ends with
EOS, and is cut into pieces of at most `max_length` tokens (a long document is split, never
quarantined); the SFT batcher then packs the pieces into rows with no attention across them.
Rows are validated and bad ones quarantined like chat rows (`io.load_rows`): a row must be an
object with a non-empty string `text`; other keys (ids, metadata) are kept out of training.
"""

from __future__ import annotations

from typing import Any

from tempering.data.formats import RowInvalid
from tempering.data.io import LoadResult, where
from tempering.data.render import RenderedExample


def check_text_row(row: Any) -> str:
    """The `text` of one plain-text row.

    Raises:
        RowInvalid: not an object, no `text`, or a `text` that is not a non-empty string.
    """
    if not isinstance(row, dict):
        raise RowInvalid(f"row is not a JSON object (got {type(row).__name__})")
    if "text" not in row:
        chat = " (a chat row: remove data.format: text to train on conversations)" if "messages" in row else ""
        raise RowInvalid(f"no 'text' field (keys: {', '.join(sorted(map(str, row))) or 'none'}){chat}")
    text = row["text"]
    if not isinstance(text, str):
        raise RowInvalid(f"'text' must be a string, got {type(text).__name__}")
    if not text.strip():
        raise RowInvalid("empty 'text'")
    return text


def render_text_records(loaded: LoadResult, tokenizer: Any, max_length: int) -> list[RenderedExample]:
    """Token pieces (labels = ids: every token trained on) of every validated text row."""
    out = []
    for rec in loaded.records:
        ids = tokenizer(rec.value, add_special_tokens=True)["input_ids"] + [tokenizer.eos_token_id]
        out += [
            RenderedExample(ids[i : i + max_length], ids[i : i + max_length], where(rec.source, rec.location))
            for i in range(0, len(ids), max_length)
        ]
    return out
