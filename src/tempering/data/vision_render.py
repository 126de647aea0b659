"""Conversations with images -> token ids, an exact assistant-only mask and the model's pixel inputs.

The mask comes from `render.render_with_mask`, the one prefix-rendering rule of text rows, run
over the model's own processor: `ProcessorTokenizer` shows a processor (LLaVA's, Qwen2-VL's,
Idefics3's...) to it as a tokenizer whose encoding of a rendered prefix is the processor's own
expansion of that prefix's image placeholders (one `<image>` becomes as many image tokens as
the processor gives that picture). A prefix holds the conversation's first k images, so its
tokens are a token prefix of the full render exactly when the text ones are. Image tokens are
never targets, even inside an assistant turn.

Images reach the chat template as `{"type": "image"}` parts, the shape transformers' templates
read; their pixels go to the processor in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tempering.data.images import is_image_part, load_image, message_images
from tempering.data.render import IGNORE, RenderedExample, TemplateError, render_with_mask


@dataclass
class VisionExample(RenderedExample):
    """A rendered example plus the processor's pixel tensors (`pixel_values`, and for
    Qwen2-VL-style models `image_grid_thw`), images stacked along dim 0."""

    pixels: dict[str, torch.Tensor] = field(default_factory=dict)


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as a processor's chat template reads them: image parts become `{"type": "image"}`."""
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            parts = [{"type": "image"} if is_image_part(p) else p for p in m["content"]]
            m = {**m, "content": parts}
        out.append(m)
    return out


def image_token(processor: Any) -> str:
    """The placeholder a processor's chat template writes once per image."""
    token = getattr(processor, "image_token", None)
    if not isinstance(token, str):
        raise TemplateError(f"{type(processor).__name__} names no image_token; not a vision processor")
    return token


class ProcessorTokenizer:
    """A processor over one conversation's images, with the two calls `render_with_mask` makes
    of a tokenizer: `apply_chat_template(..., tokenize=False)` and `tok(text, add_special_tokens=False)`."""

    def __init__(self, processor: Any, images: list[Any]):
        self.processor, self.images = processor, images
        self.token = image_token(processor)
        self.eos_token_id = processor.tokenizer.eos_token_id

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False, add_generation_prompt: bool = False):
        return self.processor.apply_chat_template(
            messages, tokenize=tokenize, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> dict[str, Any]:
        """The processor's inputs for `text` and the first images its placeholders stand for."""
        k = text.count(self.token)
        if k > len(self.images):
            raise TemplateError(f"the render has {k} image placeholders for {len(self.images)} images")
        images = self.images[:k] or None
        return self.processor(text=[text], images=images, add_special_tokens=False, return_tensors="pt")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)["input_ids"][0].tolist()}


def render_vision_example(processor: Any, messages: list[dict], images: list[Any] | None = None) -> VisionExample:
    """Render one conversation with images through `processor` with an exact assistant-only mask.

    Args:
        processor: a transformers processor with a chat template (`image_token`, `tokenizer`).
        messages: plain message dicts; image parts are OpenAI `image_url` parts.
        images: the decoded images in order (default: loaded from the parts' URLs).
    Raises:
        TemplateError: the render is not prefix-consistent, or placeholders and images disagree.
    """
    images = [load_image(u) for u in message_images(messages)] if images is None else images
    tok = ProcessorTokenizer(processor, images)
    msgs = template_messages(messages)
    ex = render_with_mask(tok, msgs, "template")
    full = tok.encode(tok.apply_chat_template(msgs))
    if full["input_ids"][0].tolist() != ex.input_ids:
        raise TemplateError("the processor's render of the whole conversation differs from the masked one")
    image_id = processor.tokenizer.convert_tokens_to_ids(tok.token)
    labels = [IGNORE if t == image_id else y for t, y in zip(ex.input_ids, ex.labels)]
    pixels = {k: v for k, v in full.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
    return VisionExample(input_ids=ex.input_ids, labels=labels, pixels=pixels)


def prompt_inputs(processor: Any, messages: list[dict], images: list[Any] | None = None) -> dict[str, torch.Tensor]:
    """A generation prompt's processor inputs (ids, mask, pixels) for a conversation with images."""
    images = [load_image(u) for u in message_images(messages)] if images is None else images
    tok = ProcessorTokenizer(processor, images)
    return dict(tok.encode(tok.apply_chat_template(template_messages(messages), add_generation_prompt=True)))
