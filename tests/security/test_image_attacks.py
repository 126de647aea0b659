"""Attacks through images: a PNG header that claims 20000 x 20000 pixels (a decompression
bomb: a 90-character data URL), hundreds of small one-bit 4096 x 4096 PNGs in one request, and
the same pictures in training rows. The server answers each with a one-line 400 in OpenAI's
shape, checks that the model takes images before it reads one, stays live while it decodes,
and every row loader quarantines such a row with file:line and reason."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
import zlib

import httpx
import pytest
from PIL import Image
from tests.conftest import tiny_vlm
from tests.serve.conftest import ServerThread, tiny_models
from typer.testing import CliRunner

from tempering.data.images import data_url
from tempering.errors import UserError
from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig

__all__ = ["tiny_models"]  # the served tiny models (a session fixture of tests/serve)
PASSED = {"passed": True, "rules": []}


def png(width: int, height: int, ihdr: bytes | None = None) -> bytes:
    """A PNG written by hand: its header claims `width` x `height` RGB pixels, its data is empty."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0) if ihdr is None else ihdr
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def url_of(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


BOMB = url_of(png(20000, 20000))  # Pillow raises DecompressionBombError (over 2 x its limit)
WARNED = url_of(png(10000, 10000))  # Pillow only warns (DecompressionBombWarning), then would decode
TRUNCATED = url_of(png(1, 1, ihdr=b"\x00" * 5))  # Pillow raises ValueError("Truncated IHDR chunk")
ONE_BIT_4096 = data_url(Image.new("1", (4096, 4096)))  # 2.8 KB that decodes to 48 MiB of RGB
RED = data_url(Image.new("RGB", (40, 30), (220, 30, 30)))


@pytest.fixture(autouse=True)
def host_guard():
    """No sandbox runs here: the battery's guard of sandbox leftovers has nothing to check."""
    yield


def ask(*urls: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": "What is this?"}]}]


def post(url, path, key, body):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def deploy(root, models) -> tuple[str, str, ServerThread]:
    """A server whose `production` and `candidate` releases are `models`; (url, key, thread)."""
    releases = Releases(Registry(root / "registry.sqlite"))
    for model, alias in zip(models, ("production", "candidate")):
        releases.promote(model, gate=PASSED, alias=alias)
    registry = str(root / "registry.sqlite")
    app = create_app(
        ServeConfig.model_validate(
            {"state": root / "state", "registry": registry, "max_tokens": 4, "arena_max_tokens": 2}
        )
    )
    _, key = app.state.store.create_key("mallory")
    thread = ServerThread(app)
    return thread.url, key, thread


@pytest.fixture(scope="module")
def text_server(tiny_models, tmp_path_factory):
    url, key, thread = deploy(tmp_path_factory.mktemp("text"), tiny_models)
    yield url, key
    thread.stop()


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    from tempering.models.vlm import save_vlm

    root = tmp_path_factory.mktemp("vision")
    vlm = save_vlm(*tiny_vlm(), root / "vlm")
    url, key, thread = deploy(root, [vlm, vlm])  # two releases of one VLM: the arena has its two contestants
    yield url, key
    thread.stop()


def refused(r: httpx.Response, message: str, param: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert message in error["message"] and error["param"] == param, error
    assert error["type"] == "invalid_request_error" and "\n" not in error["message"]


# ------------------------------------------------------------------ the server
def test_a_decompression_bomb_is_a_400_on_chat_and_the_arena(vision_server):
    url, key = vision_server
    for image in (BOMB, WARNED):
        r = post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(image)})
        refused(r, "image too large", "messages[0].content[0]")
        refused(
            post(url, "/arena/battles", key, {"prompt": "What is this?", "image": image}), "image too large", "image"
        )
    assert post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(RED)}).status_code == 200


def test_a_text_only_model_refuses_images_before_reading_them(text_server):
    url, key = text_server
    r = post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(BOMB)})
    refused(r, "is text-only", "messages")
    r = post(url, "/arena/battles", key, {"prompt": "What is this?", "image": BOMB})
    refused(r, "text-only: the arena cannot show it a picture", "image")
    assert "v1" not in r.text and "v2" not in r.text  # the blind battle names neither contestant


def test_images_per_request_are_capped_before_any_is_decoded(vision_server):
    url, key = vision_server
    r = post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(*[RED] * 9)})
    refused(r, "this request has 9 images; this server takes at most 8", "messages")
    r = post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(*[ONE_BIT_4096] * 3)})
    refused(r, f"over {2 * 4096 * 4096} pixels (at messages[0].content[2]: 4096x4096)", "messages[0].content[2]")
    two = post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(*[ONE_BIT_4096] * 2)})
    assert two.status_code == 200, two.text[:300]  # the cap is on the sum: two such pictures fit


def test_a_flood_of_images_does_not_stall_the_server(text_server):
    """300 one-bit 4096 x 4096 PNGs (830 KB of JSON, 14 GiB once decoded): the landed server
    decoded them on its event loop, and /health did not answer until they were all done."""
    url, key = text_server
    flood: dict[str, httpx.Response] = {}
    body = {"model": "production", "messages": ask(*[ONE_BIT_4096] * 300)}
    sender = threading.Thread(target=lambda: flood.update(r=post(url, "/v1/chat/completions", key, body)))
    sender.start()
    polls = 0
    while sender.is_alive() or polls == 0:
        assert httpx.get(url + "/health", timeout=5).status_code == 200  # a hang bound: ReadTimeout fails
        polls += 1
    sender.join()
    refused(flood["r"], "is text-only", "messages")


def test_image_decoding_never_runs_on_the_event_loop(vision_server, monkeypatch):
    import tempering.data.images as images

    url, key = vision_server
    where, decode = [], images.decode_image

    def recording(data: bytes):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("worker thread")
        return decode(data)

    monkeypatch.setattr(images, "decode_image", recording)
    assert post(url, "/v1/chat/completions", key, {"model": "production", "messages": ask(RED)}).status_code == 200
    assert post(url, "/arena/battles", key, {"prompt": "What is this?", "image": RED}).status_code == 200
    assert where and set(where) == {"worker thread"}, where


# ------------------------------------------------------------------ rows
def test_a_bomb_row_is_quarantined_by_the_loaders(tmp_path):
    from tempering.cli import app as cli
    from tempering.data.io import load_rows
    from tempering.serve.arena import load_prompts

    def row(image: str) -> str:
        return json.dumps({"messages": [*ask(image), {"role": "assistant", "content": "a picture"}]})

    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([row(RED), row(BOMB), row(WARNED), row(TRUNCATED)]) + "\n")
    loaded = load_rows([str(path)])
    assert len(loaded.records) == 1 and [str(e).split(": ", 1)[0] for e in loaded.errors] == [
        f"{path}:{n}" for n in (2, 3, 4)
    ]
    reasons = [e.reason for e in loaded.errors]
    assert "image too large" in reasons[0] and "image too large" in reasons[1] and "not decodable" in reasons[2]
    quarantine = tmp_path / "quarantine.jsonl"
    res = CliRunner().invoke(cli, ["data", "validate", str(path), "--no-render", "--quarantine", str(quarantine)])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.exception  # bad rows, not a crash
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"rows": 4, "valid": 1, "quarantined": 3}
    assert len(quarantine.read_text().splitlines()) == 3
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is this?", "image": BOMB}) + "\n")
    with pytest.raises(UserError, match=f"{prompts}:1: image too large"):  # one `error:` line from the CLI
        load_prompts(prompts)
