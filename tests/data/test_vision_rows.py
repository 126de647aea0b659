"""Image rows: OpenAI `image_url` parts load in every chat format, bad images are quarantined with
file:line: reason, images hash by pixels (exact) and by dHash (near duplicates)."""

import base64
import json

import pytest
from PIL import Image

from tempering.data.images import NEAR_DUPLICATE_BITS, data_url, dhash_distance, image_dhash, image_digest, load_image
from tempering.data.io import load_rows
from tempering.data.render import render_records

RED = Image.new("RGB", (24, 16), (220, 30, 30))


def image_part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def user_with(url, text="What colour is this?"):
    return {"role": "user", "content": [image_part(url), {"type": "text", "text": text}]}


def write_rows(tmp_path, rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_image_rows_load_in_every_chat_format_and_relative_files_resolve(tmp_path):
    RED.save(tmp_path / "red.png")
    url = data_url(RED)
    rows = [
        {"messages": [user_with(url), {"role": "assistant", "content": "red"}]},
        {"prompt": [user_with("red.png")], "completion": "red"},
        {"conversations": [user_with(url), {"from": "gpt", "value": "red"}]},
    ]
    loaded = load_rows([str(write_rows(tmp_path, rows))])
    assert not loaded.errors, [str(e) for e in loaded.errors]
    urls = [rec.value.to_dicts()[0]["content"][0]["image_url"]["url"] for rec in loaded.records]
    assert urls[0] == url and urls[1] == str(tmp_path / "red.png")
    assert image_digest(load_image(urls[1])) == image_digest(load_image(url))


@pytest.mark.parametrize(
    "url, reason",
    [
        ("data:image/png;base64," + base64.b64encode(b"not a png at all").decode(), "image is not decodable"),
        ("data:image/png;base64,@@@", "invalid base64"),
        ("missing.png", "image file not found"),
        ("https://example.com/cat.png", "is not fetched"),
        (
            "data:image/tiff;base64,"
            + base64.b64encode(
                (lambda b: (RED.save(b, format="TIFF"), b.getvalue())[1])(__import__("io").BytesIO())
            ).decode(),
            "unsupported image type TIFF",
        ),
        (  # a PNG whose IHDR chunk is 5 bytes: Pillow raises ValueError, which crashed the loader
            "data:image/png;base64,"
            + base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\x05IHDR" + bytes(5) + b"\x00" * 4).decode(),
            "image is not decodable (ValueError: Truncated IHDR chunk)",
        ),
    ],
)
def test_bad_image_rows_are_quarantined_with_file_line_and_reason(tmp_path, url, reason):
    good = {"messages": [user_with(data_url(RED)), {"role": "assistant", "content": "red"}]}
    bad = {"messages": [user_with(url), {"role": "assistant", "content": "red"}]}
    path = write_rows(tmp_path, [good, bad])
    loaded = load_rows([str(path)])
    assert len(loaded.records) == 1 and len(loaded.errors) == 1
    assert str(loaded.errors[0]).startswith(f"{path}:2: message 0: content part 0: ")
    assert reason in loaded.errors[0].reason


def test_a_too_large_image_is_quarantined(tmp_path, monkeypatch):
    monkeypatch.setattr("tempering.data.images.MAX_IMAGE_PIXELS", 100)
    path = write_rows(tmp_path, [{"messages": [user_with(data_url(RED)), {"role": "assistant", "content": "red"}]}])
    (err,) = load_rows([str(path)]).errors
    assert "image too large: 24x16 pixels > 100" in str(err)


def test_a_text_only_model_quarantines_image_rows(tmp_path, smol_tokenizer):
    text = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    image = {"messages": [user_with(data_url(RED)), {"role": "assistant", "content": "red"}]}
    loaded = load_rows([str(write_rows(tmp_path, [text, image]))])
    examples = render_records(loaded, smol_tokenizer, "template", 512)
    assert len(examples) == 1
    assert str(loaded.errors[0]).startswith(f"{tmp_path / 'rows.jsonl'}:2: has image parts")


def test_image_hashes_are_exact_by_pixels_and_near_by_dhash():
    gradient = Image.effect_mandelbrot((64, 64), (-2.0, -1.5, 1.0, 1.5), 40).convert("RGB")
    jpeg_copy = load_image(data_url(gradient, "JPEG"))
    brighter = gradient.point(lambda v: min(255, v + 12)).resize((80, 80))
    other = gradient.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    assert image_digest(load_image(data_url(gradient))) == image_digest(gradient)
    assert image_digest(jpeg_copy) != image_digest(gradient)
    assert dhash_distance(image_dhash(jpeg_copy), image_dhash(gradient)) <= NEAR_DUPLICATE_BITS
    assert dhash_distance(image_dhash(brighter), image_dhash(gradient)) <= NEAR_DUPLICATE_BITS
    assert dhash_distance(image_dhash(other), image_dhash(gradient)) > 2 * NEAR_DUPLICATE_BITS


def test_dedup_tells_image_rows_apart_by_their_pictures():
    from tempering.data.dedup import Deduper, dedup_rows

    scene = Image.effect_mandelbrot((64, 64), (-2.0, -1.5, 1.0, 1.5), 40).convert("RGB")
    other = scene.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    question = "Describe everything you can see in this picture, its shapes, its shading and its colours."

    def row(image):
        return {"messages": [user_with(data_url(image), question), {"role": "assistant", "content": "A fractal."}]}

    rows = [row(scene), row(other), row(scene), row(scene.point(lambda v: min(255, v + 12)))]
    kept = []
    report = dedup_rows(enumerate(rows), Deduper(threshold=0.7), kept.append)
    assert len(kept) == 2  # the same question about another picture is not a duplicate
    kinds = [m["kind"] for c in report.clusters.values() for m in c.members]
    assert sorted(kinds) == ["exact", "near"]  # the same pixels; a brightened copy
