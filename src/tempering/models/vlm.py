"""Vision-language models: one assembled here from transformers classes, and any saved one loaded.

No pretrained VLM can be fetched here, so `assemble_vlm` builds a LLaVA-shaped one: a small
SigLIP vision encoder (random weights, transformers' `SiglipVisionModel`), LLaVA's two-layer
projector, and a causal language model whose weights are copied in (the default model by
default). Its processor is transformers' `LlavaProcessor` over the language model's tokenizer
plus an `<image>` token and the PIL SigLIP image processor (no torchvision needed); its chat
template is ChatML with content parts (SmolLM2's turn markup, without its default system turn:
image prompts stay short).

A real VLM (Qwen2-VL, SmolVLM/Idefics3, LLaVA) is a saved directory: `load_vlm` reads it with
`AutoModelForImageTextToText` and `AutoProcessor`, the same calls as for the assembled one.

`VLM_PARTS` names the parameter groups the two-stage recipe trains (`trainable_parts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.errors import UserError

IMAGE_TOKEN = "<image>"

CHATML_WITH_IMAGES = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class VisionTower:
    """The shape of the vision encoder `assemble_vlm` builds (SigLIP-style ViT)."""

    image_size: int = 64
    patch_size: int = 8
    hidden_size: int = 192
    layers: int = 4
    heads: int = 4

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def vlm_processor(tokenizer: Any, tower: VisionTower) -> Any:
    """A `LlavaProcessor` over `tokenizer` (an `<image>` token added) and a PIL SigLIP image processor."""
    from transformers import LlavaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    if IMAGE_TOKEN not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    images = SiglipImageProcessorPil(size={"height": tower.image_size, "width": tower.image_size})
    return LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=tower.patch_size,
        vision_feature_select_strategy="full",
        image_token=IMAGE_TOKEN,
        chat_template=CHATML_WITH_IMAGES,
    )


def keep_first_layers(language_model: Any, layers: int) -> Any:
    """`language_model` cut to its first `layers` decoder layers (embeddings, final norm and head
    kept): a cheaper language model that is still the same model's weights."""
    total = language_model.config.num_hidden_layers
    if not 1 <= layers <= total:
        raise UserError(f"lm layers {layers} is not in 1..{total} (the model's decoder layers)")
    language_model.model.layers = language_model.model.layers[:layers]
    language_model.config.num_hidden_layers = layers
    if getattr(language_model.config, "layer_types", None):
        language_model.config.layer_types = language_model.config.layer_types[:layers]
    return language_model


def assemble_vlm(language_model: Any, tokenizer: Any, tower: VisionTower = VisionTower(), seed: int = 0):
    """(model, processor): a LLaVA model over `language_model`'s weights and a new vision tower.

    The language model's weights are copied exactly; the embedding grows by the `<image>` row.
    """
    import torch
    from transformers import LlavaConfig, LlavaForConditionalGeneration, SiglipVisionConfig

    processor = vlm_processor(tokenizer, tower)
    vision = SiglipVisionConfig(
        hidden_size=tower.hidden_size,
        intermediate_size=tower.hidden_size * 4,
        num_hidden_layers=tower.layers,
        num_attention_heads=tower.heads,
        image_size=tower.image_size,
        patch_size=tower.patch_size,
    )
    text = language_model.config
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),  # read back as image_token_id
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=text.tie_word_embeddings,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(language_model.model.state_dict())
    if not text.tie_word_embeddings:
        model.lm_head.load_state_dict(language_model.lm_head.state_dict())
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.tie_weights()
    model.config._attn_implementation = "sdpa"
    return model, processor


def save_vlm(model: Any, processor: Any, out: str | Path) -> Path:
    """Model and processor in one Hugging Face directory (`load_vlm` reads it back)."""
    from tempering.atomic import publish_dir

    out = Path(out)
    with publish_dir(out) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    return out


def is_vlm_dir(path: str | Path) -> bool:
    """Whether a model directory holds a vision-language model (a processor with an image processor)."""
    path = Path(path)
    return (path / "preprocessor_config.json").is_file() or (path / "processor_config.json").is_file()


def is_vlm(spec: str) -> bool:
    """Whether a model spec names a vision-language model (or an adapter over one)."""
    from tempering.models.load import ModelNotFound, adapter_base, resolve_model

    try:
        local = resolve_model(spec)
    except ModelNotFound:
        return False
    base = adapter_base(local)
    return is_vlm_dir(local) or (base is not None and is_vlm(base))


def load_vlm(spec: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, processor) for a saved VLM directory (assembled here or a real one); an adapter
    directory loads its base with the adapter attached (trainable)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from tempering.models.load import adapter_base, resolve_model

    local = resolve_model(spec)
    base = adapter_base(local)
    model = AutoModelForImageTextToText.from_pretrained(base or local, dtype=getattr(torch, dtype))
    processor = AutoProcessor.from_pretrained(base or local)
    if base:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, local, is_trainable=True)
    return model, processor


VLM_PARTS = ("vision", "projector", "language")


def part_of(name: str) -> str:
    """Which of `VLM_PARTS` a parameter name belongs to (LLaVA, Qwen2-VL and Idefics3 names)."""
    if any(k in name for k in ("vision_tower", "visual.", "vision_model")) and "merger" not in name:
        return "vision"
    if any(k in name for k in ("multi_modal_projector", "merger", "connector")):
        return "projector"
    return "language"


def part_modules(model: Any, parts: set[str]) -> list[str]:
    """The names of the top modules of `parts` (what PEFT's `modules_to_save` takes)."""
    names = {n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1] in _PART_MODULES}
    return sorted({n.rsplit(".", 1)[-1] for n in names if part_of(n + ".") in parts})


_PART_MODULES = ("vision_tower", "multi_modal_projector", "visual", "vision_model", "connector")


def trainable_parts(model: Any, parts: set[str]) -> dict[str, int]:
    """Train only the parameters of `parts` (a subset of `VLM_PARTS`); LoRA parameters stay
    trainable wherever they sit (a PEFT wrapper's frozen `original_module` copies never). Returns the
    trainable parameter count per part."""
    unknown = parts - set(VLM_PARTS)
    if unknown:
        raise UserError(f"unknown VLM part(s) {sorted(unknown)}; expected some of {', '.join(VLM_PARTS)}")
    counts: dict[str, int] = dict.fromkeys(VLM_PARTS, 0)
    for name, p in model.named_parameters():
        part = part_of(name)
        p.requires_grad_(("lora_" in name or part in parts) and "original_module" not in name)
        if p.requires_grad:
            counts[part] += p.numel()
    return counts


def vlm_backbone(model: Any) -> tuple[Any, Any]:
    """(the multimodal backbone that merges image features into the text, the LM head) of a
    VLM, through a PEFT wrapper if there is one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.get_output_embeddings()
