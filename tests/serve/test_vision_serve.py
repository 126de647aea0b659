"""Images through `temper serve`: the official `openai` client sends an `image_url` part to a vision
model and gets an answer; bad images and text-only models are one-line 400s; the arena shows a
battle's image to its annotators (in a real browser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import openai
import pytest
from PIL import Image

from tempering.data.images import data_url
from tempering.models.vlm import save_vlm
from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig
from tests.conftest import tiny_vlm
from tests.serve.conftest import ServerThread

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img_arena_vision.png"
RED = data_url(Image.new("RGB", (40, 30), (220, 30, 30)))


def ask(image: str, text: str = "What colour is this?") -> list[dict]:
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}],
        }
    ]


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return [save_vlm(*tiny_vlm(seed=s), root / f"vlm{s}") for s in (0, 1)]


@pytest.fixture(scope="module")
def vision_server(vlm_dirs, tmp_path_factory):
    app = create_app(ServeConfig(state=tmp_path_factory.mktemp("state"), model=str(vlm_dirs[0])))
    _, secret = app.state.store.create_key("tester")
    thread = ServerThread(app)
    yield openai.OpenAI(base_url=thread.url + "/v1", api_key=secret, max_retries=0, timeout=120)
    thread.stop()


def test_the_openai_client_sends_an_image_and_gets_an_answer(vision_server):
    model = vision_server.models.list().data[0].id
    answers = [
        vision_server.chat.completions.create(model=model, messages=ask(RED), temperature=0, max_tokens=4, logprobs=True, top_logprobs=2)
        for _ in range(2)
    ]  # fmt: skip
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content
    assert answers[0].usage.completion_tokens == 4 and answers[0].usage.prompt_tokens > 16  # 16 image tokens
    blue = vision_server.chat.completions.create(
        model=model, messages=ask(data_url(Image.new("RGB", (40, 30), (20, 30, 220)))), temperature=0, max_tokens=4,
        logprobs=True, top_logprobs=2,
    )  # fmt: skip
    first = lambda r: r.choices[0].logprobs.content[0].top_logprobs[0].logprob  # noqa: E731
    assert first(blue) != first(answers[0])  # the picture reaches the model


def test_bad_images_are_one_line_400s(vision_server):
    model = vision_server.models.list().data[0].id
    for url, reason in (
        ("data:image/png;base64,aGVsbG8=", "image is not decodable"),
        ("https://example.com/cat.png", "the server fetches nothing"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            vision_server.chat.completions.create(model=model, messages=ask(url), max_tokens=2)
        assert reason in err.value.body["message"] and err.value.body["param"] == "messages[0].content[0]"


def test_a_text_only_model_refuses_images(client):
    with pytest.raises(openai.BadRequestError, match="is text-only"):
        client.chat.completions.create(model=client.models.list().data[0].id, messages=ask(RED), max_tokens=2)


@pytest.mark.skipif(CHROMIUM is None, reason="needs the system chromium")
def test_the_arena_shows_the_image_to_annotators(vlm_dirs, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    releases = Releases(Registry(tmp_path / "registry.sqlite"))
    for model, alias in zip(vlm_dirs, ("production", "candidate")):
        releases.promote(model, gate={"passed": True, "rules": []}, alias=alias)
    Image.effect_mandelbrot((48, 48), (-2.0, -1.5, 1.0, 1.5), 30).convert("RGB").save(tmp_path / "picture.png")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "Describe the picture.", "image": "picture.png"}\n')
    cfg = ServeConfig(
        state=tmp_path / "state", registry=str(tmp_path / "registry.sqlite"), arena_prompts=tmp_path / "prompts.jsonl",
        arena_temperature=0, arena_max_tokens=4,
    )  # fmt: skip
    app = create_app(cfg)
    _, secret = app.state.store.create_key("ann1")
    thread = ServerThread(app)
    try:
        expect.set_options(timeout=60_000)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            page.goto(thread.url + "/arena")
            page.fill("#key", secret)
            page.click("#next")
            expect(page.locator("#shown-image")).to_be_visible()
            assert page.get_attribute("#shown-image", "src").startswith("data:image/png;base64,")
            assert page.evaluate("document.getElementById('shown-image').naturalWidth") == 48
            page.click("#votes button[data-choice='tie']")
            expect(page.locator("#who-a")).not_to_be_empty()
            page.screenshot(path=str(SCREENSHOT))
            browser.close()
    finally:
        thread.stop()
