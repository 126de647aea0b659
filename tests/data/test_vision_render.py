"""Token-exact assistant-only masks with images, through the model's own processor: the assembled
LLaVA-shaped VLM and a Qwen2-VL processor (dynamic resolution) built from its classes."""

import pytest
import torch
from PIL import Image

from tempering.data.images import data_url
from tempering.data.render import IGNORE, TemplateError
from tempering.data.vision_render import render_vision_example
from tests.conftest import qwen2_vl_processor, tiny_vlm


def conversation(size_a=(40, 30), size_b=(60, 130)):
    red = data_url(Image.new("RGB", size_a, (220, 30, 30)))
    green = data_url(Image.new("RGB", size_b, (30, 200, 30)))
    return [
        {"role": "system", "content": "Answer in one word."},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": red}}, {"type": "text", "text": "Colour?"}],
        },
        {"role": "assistant", "content": "red"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "And this one?"}, {"type": "image_url", "image_url": {"url": green}}],
        },
        {"role": "assistant", "content": "green, clearly"},
    ]


@pytest.fixture(scope="module", params=["assembled-llava", "qwen2-vl"])
def processor(request):
    return tiny_vlm()[1] if request.param == "assembled-llava" else qwen2_vl_processor()


def assert_mask_is_the_assistant_turns_exactly(processor, ex, assistant_texts):
    tok = processor.tokenizer
    image_id = tok.convert_tokens_to_ids(processor.image_token)
    spans, current = [], []
    for t, y in zip(ex.input_ids, ex.labels):
        if y != IGNORE:
            assert y == t
            current.append(t)
        elif current:
            spans.append(current)
            current = []
    spans += [current] if current else []
    assert [tok.decode(s) for s in spans] == [a + "<|im_end|>" for a in assistant_texts]
    assert all(y == IGNORE for t, y in zip(ex.input_ids, ex.labels) if t == image_id)


def test_masks_with_images_are_token_exact(processor):
    ex = render_vision_example(processor, conversation())
    assert_mask_is_the_assistant_turns_exactly(processor, ex, ["red", "green, clearly"])
    full = processor(
        text=[
            processor.apply_chat_template(
                [
                    {**m, "content": [{"type": "image"} if p.get("type") == "image_url" else p for p in m["content"]]}
                    if isinstance(m["content"], list)
                    else m
                    for m in conversation()
                ]
            )
        ],
        images=[Image.new("RGB", (40, 30)), Image.new("RGB", (60, 130))],
        add_special_tokens=False,
    )
    assert ex.input_ids == full["input_ids"][0]  # the processor's own expansion of the placeholders
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    n_image_tokens = sum(t == image_id for t in ex.input_ids)
    if "image_grid_thw" in ex.pixels:  # Qwen2-VL: tokens follow each image's size (2x2 patches merged)
        assert n_image_tokens == int(ex.pixels["image_grid_thw"].prod(-1).sum()) // 4
        assert ex.pixels["image_grid_thw"].tolist() == [[1, 4, 6], [1, 10, 4]]
    else:  # LLaVA: a fixed grid per image
        assert n_image_tokens == 2 * (32 // 8) ** 2 and ex.pixels["pixel_values"].shape == (2, 3, 32, 32)


def test_an_image_in_an_assistant_turn_is_never_a_target(processor):
    msgs = conversation()
    msgs[2] = {"role": "assistant", "content": [{"type": "text", "text": "red"}, msgs[1]["content"][0]]}
    ex = render_vision_example(processor, msgs)
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert image_id in ex.input_ids and all(y == IGNORE for t, y in zip(ex.input_ids, ex.labels) if t == image_id)
    assert ex.n_loss_tokens > 0


def test_placeholders_without_images_are_a_template_error(processor):
    with pytest.raises(TemplateError, match="2 image placeholders for 1 images"):
        render_vision_example(processor, conversation(), images=[Image.new("RGB", (40, 30))])


def test_the_assembled_vlm_runs_on_rendered_examples_and_round_trips(tmp_path):
    from tempering.models.vlm import load_vlm, save_vlm

    model, processor = tiny_vlm()
    ex = render_vision_example(processor, conversation())
    logits = model(input_ids=torch.tensor([ex.input_ids]), **ex.pixels).logits
    loaded, processor2 = load_vlm(str(save_vlm(model, processor, tmp_path / "vlm")))
    again = render_vision_example(processor2, conversation())
    assert (again.input_ids, again.labels) == (ex.input_ids, ex.labels)
    torch.testing.assert_close(loaded(input_ids=torch.tensor([ex.input_ids]), **ex.pixels).logits, logits)
