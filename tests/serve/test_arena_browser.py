"""The arena page works in a real browser (Playwright driving the system Chromium):
vote, reveal, ranking update, a second annotator (key) judging the same drawn battle;
a screenshot is kept in docs/img_arena.png."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig
from tests.serve.conftest import TEXT_ANSWER, TOOL_ANSWER, ServerThread

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img_arena.png"


@pytest.fixture()
def arena_server(tiny_models, tmp_path):
    releases = Releases(Registry(tmp_path / "registry.sqlite"))
    # v1 (production): tool-call answers, v2 (candidate): "The answer is 4."; the arena pairs live releases
    for model, alias in zip(tiny_models, ("production", "candidate")):
        releases.promote(model, gate={"passed": True, "rules": []}, alias=alias)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("What is 2+2?\n")
    app = create_app(
        ServeConfig(
            state=tmp_path / "state",
            registry=str(tmp_path / "registry.sqlite"),
            seed=1,
            arena_temperature=0,
            arena_prompts=prompts,
        )
    )  # greedy: the answers are the known texts
    secrets = [app.state.store.create_key(name)[1] for name in ("ann1", "ann2")]  # one key per annotator
    thread = ServerThread(app)
    yield thread.url, secrets, app.state.store
    thread.stop()


@pytest.mark.skipif(CHROMIUM is None, reason="needs the system chromium")
def test_vote_reveal_and_ranking_in_a_browser(arena_server):
    from playwright.sync_api import expect, sync_playwright

    url, (first, second), store = arena_server
    expect.set_options(timeout=30_000)  # a loaded 2-core machine: the first ranking imports its libraries
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1000, "height": 760})
        page.goto(url + "/arena")
        page.fill("#key", first)
        page.click("#next")  # no typed prompt: one drawn from the arena's prompts, shared with other keys
        expect(page.locator("#battle")).to_be_visible()
        shown = {page.text_content("#answer-a"), page.text_content("#answer-b")}
        assert shown == {TOOL_ANSWER, TEXT_ANSWER}
        assert page.text_content("#who-a") == "" and page.text_content("#who-b") == ""  # blind until the vote
        text_side = "a" if page.text_content("#answer-a") == TEXT_ANSWER else "b"
        page.click(f"#votes button[data-choice='{text_side}']")
        expect(page.locator(f"#who-{text_side}")).to_have_text("v2")  # revealed: the text answer was v2
        expect(page.locator("#ranking tbody tr")).to_have_count(2)
        expect(page.locator("#ranking tbody tr").first).to_have_attribute("data-model", "v2")
        # a second annotator (key) gets the same battle (agreement needs shared items) and agrees
        page.fill("#key", second)
        page.click("#next")
        expect(page.locator("#who-a")).to_have_text("")
        assert {page.text_content("#answer-a"), page.text_content("#answer-b")} == shown
        text_side = "a" if page.text_content("#answer-a") == TEXT_ANSWER else "b"
        page.click(f"#votes button[data-choice='{text_side}']")
        expect(page.locator("#agreement")).to_contain_text("2 votes on 1 battles; mean agreement 1")
        expect(page.locator("#ranking tr[data-model='v2'] td").nth(3)).to_have_text("2")  # two wins
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        browser.close()
    assert [(v["annotator"], v["choice"] in "ab") for v in store.votes()] == [("ann1", True), ("ann2", True)]
