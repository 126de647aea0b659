"""Image inputs of a served request, checked before anything renders them (chat and the arena).

Cheapest first, so that a request which cannot be served costs no decode: the model takes
images (a text-only model refuses before a byte of an image is read); images sit in user or
system turns; at most `ImageLimits.max_images` of them, each a `data:image/...;base64` URL; the
pixels their headers declare add up to at most `ImageLimits.max_pixels` (read from the headers,
nothing decoded: a 4096 x 4096 one-bit PNG is a few KB that decodes to 50 MB of RGB); then each
is decoded (`data/images.py`: a bad or oversized one, a decompression bomb included, is a
400 naming its field). The model's processor decodes them again to build the prompt: the
limits bound both. Decoding takes CPU time (~60 ms for a one-bit 4096 x 4096 PNG on a CI core),
so the callers run these checks in a worker thread, never on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tempering.serve.protocol import ApiError, ChatCompletionRequest


@dataclass(frozen=True)
class ImageLimits:
    """What one request's images may cost (`ServeConfig.max_images`, `ServeConfig.max_image_pixels`)."""

    max_images: int
    max_pixels: int


def takes_images(served: Any) -> bool:
    """Whether a served model reads images (a vision model's engine carries its processor)."""
    return getattr(served.engine, "processor", None) is not None


def check_chat_images(served: Any, req: ChatCompletionRequest, limits: ImageLimits) -> None:
    """Every image part of a chat request checked and decoded; a 400 naming the field at fault."""
    images = []
    for i, m in enumerate(req.messages):
        if not m.has_images():
            continue
        if not takes_images(served):
            raise ApiError(
                400, f"model {req.model!r} is text-only: it does not take image_url parts", "invalid_value", "messages"
            )
        if m.role not in ("user", "system", "developer"):
            raise ApiError(
                400,
                f"images are read in user turns only (messages[{i}] is {m.role!r})",
                "invalid_value",
                f"messages[{i}].content",
            )
        images += [
            (f"messages[{i}].content[{j}]", part["image_url"]["url"])
            for j, part in enumerate(m.parts())
            if part["type"] == "image_url"
        ]
    check_images(images, limits, "messages")


def check_images(images: list[tuple[str, str]], limits: ImageLimits, param: str) -> None:
    """Check (field, data URL) pairs against `limits`, headers before any decode.

    Raises:
        ApiError: 400 naming the field (`param` for the count and the total).
    """
    from tempering.data.formats import RowInvalid
    from tempering.data.images import decode_image, image_bytes, image_size

    if len(images) > limits.max_images:
        raise ApiError(
            400,
            f"this request has {len(images)} images; this server takes at most {limits.max_images} per request",
            "invalid_value",
            param,
        )
    encoded, total = [], 0
    for field, url in images:
        if not url.startswith("data:image/"):
            raise ApiError(
                400, "an image must be a data:image/...;base64 URL (the server fetches nothing)", "invalid_value", field
            )
        try:
            data = image_bytes(url)
            width, height = image_size(data)
        except RowInvalid as exc:
            raise ApiError(400, str(exc), "invalid_value", field) from None
        total += width * height
        if total > limits.max_pixels:
            raise ApiError(
                400,
                f"the images of this request hold over {limits.max_pixels} pixels (at {field}: {width}x{height}); "
                "send fewer or smaller pictures",
                "invalid_value",
                field,
            )
        encoded.append((field, data))
    for field, data in encoded:
        try:
            decode_image(data)
        except RowInvalid as exc:
            raise ApiError(400, str(exc), "invalid_value", field) from None
