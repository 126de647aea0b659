"""Images inside conversations: OpenAI-style `image_url` content parts, checked, decoded and hashed.

A message's content may be a list of parts (OpenAI's shape):

    {"type": "text", "text": "How many squares?"}
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..." | "path/to/file.png"}}

A relative file path is read against the data file's folder; remote (`http(s)://`) URLs are
refused, since nothing here fetches over a network while training. `check_images` decodes every
image of a row once at load, so an undecodable, unsupported or too large image is that row's
error (`file:line: reason`, quarantined like any bad row; a decompression bomb is a too-large
image) and never a crash mid-training.

Hashes: `image_digest` is the SHA-256 of the decoded pixels (mode, size, bytes), so the same
picture as PNG and as a data URL is one image; `image_dhash` is a 64-bit difference hash
(8x9 greyscale, a bit per left/right comparison) whose Hamming distance finds near duplicates
(re-encoded, slightly resized or recoloured copies).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tempering.data.formats import RowInvalid

MAX_IMAGE_BYTES = 8 * 1024 * 1024
"""The largest encoded image accepted (bytes)."""
MAX_IMAGE_PIXELS = 4096 * 4096
"""The largest decoded image accepted (width x height)."""
NEAR_DUPLICATE_BITS = 10
"""dHash bits two images may differ in and still count as near duplicates (a re-encoded JPEG,
a resized or brightened copy differ in 0-8 of 64 here; unrelated pictures in ~32)."""
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
"""Encodings Pillow decodes here that rows may use."""


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def image_url(part: dict) -> str:
    """The URL of an `image_url` part (OpenAI nests it: `{"image_url": {"url": ...}}`)."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise RowInvalid("an image_url part needs 'image_url': {'url': 'data:...' or a file path}")
    return url


def message_images(messages: list[dict]) -> list[str]:
    """The image URLs of a conversation, in the order the chat template meets them."""
    return [
        image_url(p) for m in messages if isinstance(m.get("content"), list) for p in m["content"] if is_image_part(p)
    ]


def has_images(messages: list[dict]) -> bool:
    return bool(message_images(messages))


def content_text(content: Any) -> str:
    """A message's content as text: a string as is; content parts as their texts, `<image>` for a
    picture (what a trajectory store or a log shows of an image prompt)."""
    if not isinstance(content, list):
        return content or ""
    return "".join("<image>" if is_image_part(p) else str(p.get("text", "")) for p in content if isinstance(p, dict))


def image_bytes(url: str, base: Path | None = None) -> bytes:
    """The encoded bytes an image URL names: a base64 data URL or a file path.

    Raises:
        RowInvalid: a remote URL, a missing file, bad base64 or too many bytes.
    """
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        if not head.endswith(";base64"):
            raise RowInvalid("image data URL is not base64 (expected data:image/...;base64,...)")
        if len(payload) * 3 // 4 > MAX_IMAGE_BYTES:
            raise RowInvalid(f"image too large: over {MAX_IMAGE_BYTES} bytes")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise RowInvalid("image data URL holds invalid base64") from None
    if url.startswith(("http://", "https://")):
        raise RowInvalid(f"remote image URL {url[:60]!r} is not fetched; embed it as a data URL or a file")
    path = Path(url.removeprefix("file://")).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise RowInvalid(f"image file not found: {path}")
    if path.stat().st_size > MAX_IMAGE_BYTES:
        raise RowInvalid(f"image too large: {path} is over {MAX_IMAGE_BYTES} bytes")
    return path.read_bytes()


@contextmanager
def _pil_errors() -> Iterator[None]:
    """Pillow's refusals of bad image bytes as `RowInvalid`. Its decompression-bomb guard raises
    `DecompressionBombError` past twice its limit and warns below that: the warning is raised
    here too (a bomb is a refused image, not a log line). `catch_warnings` swaps the process's
    filter list and is not thread-safe; a decode racing another thread's can see the warning
    as a warning, and the size check after `Image.open` refuses the image all the same."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except RowInvalid:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise RowInvalid(f"image too large: over {MAX_IMAGE_PIXELS} pixels (a decompression bomb)") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:  # ValueError: "Truncated IHDR chunk"
        raise RowInvalid(f"image is not decodable ({type(exc).__name__}: {str(exc)[:80]})") from None


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from an image's header, nothing decoded: a cheap check before paying for a decode.

    Raises:
        RowInvalid: as `decode_image`.
    """
    from PIL import Image

    with _pil_errors(), Image.open(io.BytesIO(data)) as img:
        _check_header(img)
        return img.size


def decode_image(data: bytes) -> Any:
    """A decoded RGB `PIL.Image` from encoded bytes.

    Raises:
        RowInvalid: not an image, an unsupported encoding, or more than `MAX_IMAGE_PIXELS`.
    """
    from PIL import Image

    with _pil_errors(), Image.open(io.BytesIO(data)) as img:
        _check_header(img)
        return img.convert("RGB")


def _check_header(img: Any) -> None:
    if img.format not in IMAGE_FORMATS:
        raise RowInvalid(f"unsupported image type {img.format} (use {', '.join(IMAGE_FORMATS)})")
    if img.width * img.height > MAX_IMAGE_PIXELS:
        raise RowInvalid(f"image too large: {img.width}x{img.height} pixels > {MAX_IMAGE_PIXELS}")


def load_image(url: str, base: Path | None = None) -> Any:
    """The RGB image an `image_url` URL names (see `image_bytes`, `decode_image`)."""
    return decode_image(image_bytes(url, base))


def absolute_url(url: str, base: Path | None) -> str:
    """`url` with a relative file path made absolute against `base` (data URLs unchanged)."""
    if url.startswith("data:") or base is None or Path(url).expanduser().is_absolute():
        return url
    return str((base / url).resolve())


def check_images(messages: list[dict], base: Path | None) -> list[dict]:
    """Decode every image of a conversation once; relative paths become absolute.

    Raises:
        RowInvalid: naming the message and part at fault.
    """
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for j, part in enumerate(content):
            if is_image_part(part):
                try:
                    url = image_url(part)
                    load_image(url, base)
                except RowInvalid as exc:
                    raise RowInvalid(f"message {i}: content part {j}: {exc}") from None
                part = {"type": "image_url", "image_url": {"url": absolute_url(url, base)}}
            parts.append(part)
        out.append({**m, "content": parts})
    return out


def image_digest(image: Any) -> str:
    """SHA-256 of the decoded pixels (mode, size and bytes): one digest per picture, whatever its encoding."""
    h = hashlib.sha256(f"{image.mode}:{image.width}x{image.height}:".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def image_dhash(image: Any) -> int:
    """64-bit difference hash: greyscale 9x8, one bit per pixel brighter than its right neighbour."""
    from PIL import Image

    small = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    px = list(small.getdata())
    bits = 0
    for row in range(8):
        for col in range(8):
            bits = (bits << 1) | (px[row * 9 + col] > px[row * 9 + col + 1])
    return bits


def dhash_distance(a: int, b: int) -> int:
    """Hamming distance between two `image_dhash` values (0: same picture; <= `NEAR_DUPLICATE_BITS`: a near duplicate)."""
    return (a ^ b).bit_count()


def data_url(image: Any, fmt: str = "PNG") -> str:
    """An image as a base64 data URL (what rows and the OpenAI API carry)."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"
