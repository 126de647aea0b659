"""Text of a data row, normalised to word tokens, and fast hashes of its word n-grams; and
`canonical_text`, the one string normaliser for comparing texts (answers, replies, pair sides).

Shared by dedup (`data.dedup`) and decontamination (`evals.contamination`), so both see a
row the same way: case, whitespace, line breaks and punctuation do not change the tokens.

What counts as text. Training side: every message content (all roles), plus `prompt`,
`text`, `completion`, `response`, `chosen` and `rejected`, ShareGPT `conversations` and
Alpaca `instruction`/`input`/`output` (content parts read as text), or a row that is a
plain JSON string. Suite side: `prompt`, `text`, or the non-system message contents.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib
from typing import Any, Iterable, Sequence

import numpy as np

from tempering.errors import UserError

TRAINING_TEXT_FIELDS = (
    "messages",
    "prompt",
    "text",
    "completion",
    "response",
    "chosen",
    "rejected",
    "conversations",
    "instruction",
    "input",
    "output",
)  # + ShareGPT, Alpaca
SUITE_TEXT_FIELDS = ("messages", "prompt", "text")

# Runs of letters/digits, or a single arithmetic operator.
_TOKEN = re.compile(r"[^\W_]+|[+\-*/=<>^%]")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+|[+\-*/=<>^%]")  # the same rule on lower-cased ASCII, faster
_OPERATORS = frozenset("+-*/=<>^%")
# Apostrophes join a word ("don't" -> "dont"), so dropping them changes nothing.
_APOSTROPHES = str.maketrans("", "", "'\u2019\u02bc")

_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the polynomial gram hash
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def canonical_text(text: str) -> str:
    """`text` as one comparable string: case-folded, straight apostrophes, single spaces, no space
    before punctuation, and `can ' t` / `cant` (word-level detokenised) as `can't`.

    The one normaliser for "the same text": exact answers (`verifiers/answers.py`), the refusal
    and abstention cues (`verifiers/safety.py`) and preference-pair sides (`data/audit.py`).
    Word tokens for n-gram matching are `normalize` below.
    """
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'").casefold()
    text = re.sub(r"\s*'\s*(?=(?:t|s|m|re|ve|ll|d)\b)", "'", text)
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    text = re.sub(r"\b(can|won|don|didn|doesn|isn|wasn|couldn|shouldn)t\b", r"\1't", text)
    return " ".join(text.split())


def normalize(text: str) -> list[str]:
    """Word tokens of `text`: NFKC, case-folded, punctuation and whitespace dropped.

    An arithmetic operator (+ - * / = < > ^ %) next to a number is kept as a token of
    its own, because "what is 12+5" and "what is 12-5" are different tasks; "12+5" and
    "12 + 5" give the same tokens. Elsewhere (hyphens, dashes, markdown asterisks) the
    operator characters are dropped like any other punctuation. Apostrophes are removed
    inside words ("don't" and "dont" are one token).
    """
    if text.isascii():  # NFKC changes no ASCII text and casefold is lower()
        raw = _ASCII_TOKEN.findall(text.lower().replace("'", ""))
    else:
        raw = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES))
    if _OPERATORS.isdisjoint(raw):
        return raw
    return [tok for i, tok in enumerate(raw) if tok not in _OPERATORS or _next_to_number(raw, i)]


def _next_to_number(tokens: list[str], i: int) -> bool:
    return (i > 0 and tokens[i - 1].isdecimal()) or (i + 1 < len(tokens) and tokens[i + 1].isdecimal())


def image_words(part: dict) -> str:
    """An `image_url` part as words dedup and contamination checks can compare: one word for the
    exact pixels (`images.image_digest`) and eight for the bytes of its difference hash, so the
    same picture matches exactly and a re-encoded or resized copy shares most of its words."""
    from tempering.data.formats import RowInvalid
    from tempering.data.images import image_dhash, image_digest, image_url, load_image

    try:
        image = load_image(image_url(part))
    except RowInvalid:  # unreadable here (a path relative to its file): its URL stands for it
        return "imgurl" + hashlib.sha256(repr(part.get("image_url")).encode()).hexdigest()[:16]
    dhash = image_dhash(image)
    return " ".join(
        ["imgpx" + image_digest(image)[:16], *(f"imgdh{k}x{(dhash >> (8 * k)) & 0xFF:02x}" for k in range(8))]
    )


def _field_texts(value: Any, *, skip_system: bool) -> list[str]:
    """Strings in one field: a string, or a list of messages / strings."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    texts = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            content = item.get("content", item.get("value"))  # ShareGPT turns hold "value"
            if isinstance(content, list):  # OpenAI content parts; an image reads as its fingerprint words
                content = " ".join(
                    p["text"] if isinstance(p.get("text"), str) else image_words(p)
                    for p in content
                    if isinstance(p, dict) and (isinstance(p.get("text"), str) or p.get("type") == "image_url")
                )
            if isinstance(content, str) and not (skip_system and item.get("role") == "system"):
                texts.append(content)
    return texts


def row_texts(row: Any, fields: Sequence[str] = TRAINING_TEXT_FIELDS, *, skip_system: bool = False) -> list[str]:
    """The texts of one data row that dedup and contamination checks read (see the module doc).

    Raises:
        ValueError: when the row is neither a string nor an object, or has no text.
    """
    if isinstance(row, str):
        return [row]
    if not isinstance(row, dict):
        raise UserError(f"row is a {type(row).__name__}, not an object or a string")
    texts = [t for key in fields for t in _field_texts(row.get(key), skip_system=skip_system)]
    if not any(t.strip() for t in texts):
        raise UserError(f"no text to check (expected one of {', '.join(fields)})")
    return texts


def row_tokens(texts: Iterable[str]) -> list[str]:
    """The normalised tokens of several texts, as one stream."""
    return [tok for text in texts for tok in normalize(text)]


def stable_token_ids(tokens: Sequence[str]) -> np.ndarray:
    """A 32-bit id per token (CRC-32 of its UTF-8), equal in every process; (T,) uint64."""
    return np.fromiter((zlib.crc32(t.encode()) + 1 for t in tokens), dtype=np.uint64, count=len(tokens))


def gram_hashes(ids: np.ndarray, length: int) -> np.ndarray:
    """64-bit hash of every window of `length` consecutive ids; (T - length + 1,) uint64.

    The polynomial sum(ids[k] * M^(i+length-1-k)) over each window (mod 2^64), computed
    from one prefix sum (M is odd, so it has an inverse mod 2^64), then the splitmix64
    mixer with the length folded in: windows of different lengths never share a hash by
    construction. Empty when there are fewer than `length` ids.
    """
    count = len(ids) - length + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    up, down = _powers(len(ids))
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(ids) + 1, dtype=np.uint64)
        np.cumsum(ids * down[: len(ids)], out=prefix[1:])
        h = (prefix[length:] - prefix[:count]) * up[length - 1 : length - 1 + count]
        h ^= np.uint64(length) * _MIX2
        h ^= h >> np.uint64(30)
        h *= _MIX1
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h


_POWERS: list[np.ndarray] = []


def _powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    """(M^k, M^-k) mod 2^64 for k < size (cached, grown by doubling)."""
    if not _POWERS or len(_POWERS[0]) < size:
        n = max(size, 2 * len(_POWERS[0]) if _POWERS else 4096)
        inverse = pow(int(_MULT), -1, 1 << 64)
        up = np.empty(n, dtype=np.uint64)
        down = np.empty(n, dtype=np.uint64)
        a = b = 1
        for k in range(n):
            up[k], down[k] = a, b
            a, b = a * int(_MULT) % (1 << 64), b * inverse % (1 << 64)
        _POWERS[:] = [up, down]
    return _POWERS[0], _POWERS[1]
