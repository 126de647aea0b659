"""Pictures in eval samples: stored once beside samples.jsonl, read back by the report and `temper eval show`.

A sample's `prompt` (`runner.sample_record`) is the user message's content; for an image task
that is a list of OpenAI content parts whose `image_url` holds a data URL or a file path. Kept as
it is, every sample would repeat its picture as base64 (samples x seeds x templates times), so
`store_sample_images` saves each distinct picture once, as `images/<pixel digest>.png` beside
samples.jsonl, and points the part's URL at that file (a path relative to the samples' folder,
so a run dir can be moved or copied whole).

`prompt_pieces` reads a prompt back for display as text and `SampleImage`s, resolving a stored
path, a data URL or any other file path against the samples' folder. An image that cannot be read
is a `SampleImage` with `error` set (one line: why), never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tempering.data.formats import RowInvalid
from tempering.data.images import image_digest, image_url, is_image_part, load_image

IMAGES_DIR = "images"
"""The folder beside samples.jsonl that holds its pictures."""
DIGEST_CHARS = 16
"""Hex characters of the pixel digest that name a stored picture (64 bits)."""


@dataclass(frozen=True)
class SampleImage:
    """One picture of a sample's prompt, as read back: the decoded image, or why it could not be."""

    url: str
    """The URL as the sample holds it (a path relative to the samples' folder, a data URL, a file path)."""
    path: Path | None
    """The file it was read from; None for a data URL."""
    image: Any | None = None
    """The decoded RGB `PIL.Image`; None when it could not be read."""
    error: str | None = None
    """Why it could not be read (one line); None when it was."""

    def line(self) -> str:
        """`[image WxH <file>]` (`<file>` a data URL's pixel digest for an image held inline), or
        `[image not shown: <why>]`."""
        if self.image is None:
            return f"[image not shown: {self.error}]"
        where = str(self.path) if self.path is not None else f"inline data URL, pixels {_digest(self.image)}"
        return f"[image {self.image.width}x{self.image.height} {where}]"


def _digest(image: Any) -> str:
    return image_digest(image)[:DIGEST_CHARS]


def store_sample_images(records: Sequence[dict[str, Any]], out_dir: str | Path) -> list[dict[str, Any]]:
    """`records` with each prompt picture saved once under `out_dir/images/` and its URL pointing there.

    Records without image parts come back as they are. A picture that cannot be read keeps its URL
    (the report and `eval show` then say why it is not shown).
    """
    stored: dict[str, str] = {}  # URL as given -> URL of the saved copy: a picture repeats across samples
    out = []
    for record in records:
        prompt = record.get("prompt")
        if isinstance(prompt, list) and any(is_image_part(p) for p in prompt):
            record = {**record, "prompt": [_stored_part(p, Path(out_dir), stored) for p in prompt]}
        out.append(record)
    return out


def _stored_part(part: Any, out_dir: Path, stored: dict[str, str]) -> Any:
    if not is_image_part(part):
        return part
    try:
        url = image_url(part)
    except RowInvalid:
        return part
    if url not in stored:
        stored[url] = _save_once(url, out_dir)
    value = part["image_url"]
    return {**part, "image_url": {**value, "url": stored[url]} if isinstance(value, dict) else {"url": stored[url]}}


def _save_once(url: str, out_dir: Path) -> str:
    """The relative path of `url`'s picture saved as PNG under `out_dir/images/`; `url` itself when
    it cannot be read."""
    from tempering.atomic import atomic_path

    try:
        image = load_image(url)
    except RowInvalid:
        return url
    relative = f"{IMAGES_DIR}/{_digest(image)}.png"
    path = out_dir / relative
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            image.save(tmp, format="PNG")
    return relative


def read_sample_image(url: str, base: Path) -> SampleImage:
    """The picture `url` names, a file path read against `base` (the samples' folder)."""
    path = None if url.startswith("data:") else base / Path(url.removeprefix("file://")).expanduser()
    try:
        return SampleImage(url, path, image=load_image(url, base))
    except RowInvalid as exc:
        return SampleImage(url, path, error=" ".join(str(exc).split()))


def prompt_pieces(prompt: Any, base: Path) -> list[str | SampleImage]:
    """A sample's prompt as its text parts and pictures, in order (a plain string is one piece)."""
    if not isinstance(prompt, list):
        return [str(prompt)]
    pieces: list[str | SampleImage] = []
    for part in prompt:
        if is_image_part(part):
            try:
                pieces.append(read_sample_image(image_url(part), base))
            except RowInvalid as exc:
                pieces.append(SampleImage("", None, error=str(exc)))
        elif isinstance(part, dict) and part.get("type") == "text":
            pieces.append(str(part.get("text", "")))
        else:
            pieces.append(str(part))
    return pieces
