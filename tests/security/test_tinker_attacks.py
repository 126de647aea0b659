"""Attacks on `temper tinker serve` through a real server on 127.0.0.1, by a second key and by
bodies no SDK would send: objects taken by id, session ids that are paths, bodies that are not
JSON / not protobuf / not zstd, tensors that lie about their size, requests that ask for more
memory or time than the server has. Memory is measured on a server subprocess (its peak RSS,
VmHWM); time bounds are liveness bounds (generous), not speed claims."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import zstandard
from tests.serve.conftest import ServerThread, free_port
from tests.serve.test_tinker import text_datum, tiny_base

from tempering.serve.config import TinkerServeConfig
from tempering.serve.store import Store
from tempering.serve.tinker import create_tinker_app

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402

__all__ = ["tiny_base"]  # the tiny random base model (a module fixture of tests/serve/test_tinker.py)
MB = 1 << 20
TOKENS = list(range(40, 52))


@pytest.fixture(autouse=True)
def host_guard():
    """These attacks run no sandbox: the battery's guard of sandbox leftovers has nothing to check."""
    yield


# ------------------------------------------------------------------ helpers
def config(state: Path, model: Path, **settings) -> TinkerServeConfig:
    """A fp32 Tinker deployment of `model` in `state` with `settings` over the defaults."""
    return TinkerServeConfig.model_validate({"state": state, "model": str(model), "precision": "fp32", **settings})


def sdk(url: str, secret: str):
    return tinker.ServiceClient(base_url=url, api_key="tml-" + secret)


def post(url: str, route: str, secret: str, body=None, content: bytes | None = None, headers=None):
    """One raw call with `secret`'s key: JSON `body`, or `content` bytes as sent."""
    h = {"X-API-Key": "tml-" + secret, **(headers or {})}
    if content is None:
        return httpx.post(f"{url}/api/v1/{route}", json=body, headers=h, timeout=60)
    return httpx.post(f"{url}/api/v1/{route}", content=content, headers=h, timeout=60)


def tensor(values, dtype: type = np.float32, shape=None) -> pb.Tensor:
    arr = np.asarray(values, dtype=dtype)
    kind = {np.float32: pb.DTYPE_FLOAT32, np.int64: pb.DTYPE_INT64, np.int32: pb.DTYPE_INT32}[dtype]
    return pb.Tensor(dense=arr.tobytes(), dtype=kind, shape=list(arr.shape) if shape is None else shape)


def fwd_body(model_id: str, tokens: list[int], inputs: dict[str, pb.Tensor] | None = None) -> bytes:
    """A cross_entropy ForwardBackwardRequest of one datum; `inputs` replace the well-formed ones."""
    msg = pb.ForwardBackwardRequest(model_id=model_id, loss_fn="cross_entropy", seq_id=1)
    datum = msg.data.add()
    datum.model_input.add().encoded_text.tokens = np.asarray(tokens, dtype=np.int32).tobytes()
    good = {"target_tokens": tensor(tokens, np.int64), "weights": tensor([1.0] * len(tokens))}
    for name, t in {**good, **(inputs or {})}.items():
        datum.loss_fn_inputs[name].CopyFrom(t)
    return msg.SerializeToString()


def is_sdk_error(response: httpx.Response, status: int) -> bool:
    """The SDK's error shape: the status, and a JSON body {"error": str, "category": "user"}."""
    try:
        body = response.json()
    except ValueError:  # not JSON (a 500's plain text)
        return False
    return response.status_code == status and isinstance(body.get("error"), str) and body.get("category") == "user"


def wait_result(url: str, secret: str, request_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = post(url, "retrieve_future", secret, {"request_id": request_id})
        if r.headers.get("content-type", "").startswith("application/x-protobuf"):
            return {"proto": r.content}
        body = r.json()
        if body.get("type") != "try_again":
            return body
    raise TimeoutError(request_id)


def session_of(url: str, secret: str) -> str:
    r = post(url, "create_session", secret, {"tags": [], "user_metadata": {}, "sdk_version": "0.38"})
    return r.json()["session_id"]


# ------------------------------------------------------------------ an in-process server, two keys
@pytest.fixture(scope="module")
def deployment(tiny_base, tmp_path_factory):
    """(url, alice, bob, app, alice's training client) on a tiny random model."""
    state = tmp_path_factory.mktemp("tinker_attacks")
    app = create_tinker_app(config(state, tiny_base, max_tokens=16))
    alice, bob = (app.state.store.create_key(name)[1] for name in ("alice", "bob"))
    thread = ServerThread(app)
    trainer = sdk(thread.url, alice).create_lora_training_client(base_model=str(tiny_base), rank=4, seed=0).result()
    yield thread.url, alice, bob, app, trainer
    thread.stop()


def test_a_second_key_is_refused_every_operation_on_the_first_keys_objects(deployment, tiny_base):
    url, alice, bob, app, trainer = deployment
    model_id = trainer.model_id
    state = trainer.save_state("alice-state").result().path
    sampler = trainer.save_weights_for_sampler("alice-sampler").result().path
    ephemeral_id = post(url, "save_weights_for_sampler", alice, {"model_id": model_id}).json()["request_id"]
    ephemeral = wait_result(url, alice, ephemeral_id)["sampling_session_id"]
    future = post(url, "optim_step", alice, {"model_id": model_id, "optim_params": {"learning_rate": 0.0}})
    request_id = future.json()["request_id"]
    session = model_id.split(":train:")[0]
    saved = sorted((p, p.stat().st_mtime_ns) for p in (app.state.jobs.root / model_id).rglob("*") if p.is_file())

    attempts = {
        "get_info": ("get_info", {"model_id": model_id}),
        "optim_step": ("optim_step", {"model_id": model_id, "optim_params": {"learning_rate": 1.0}}),
        "save_weights (overwrite)": (
            "save_weights",
            {"model_id": model_id, "path": "alice-state", "overwrite": True},
        ),
        "save_weights_for_sampler": ("save_weights_for_sampler", {"model_id": model_id, "path": "alice-sampler"}),
        "load_weights into alice's model": ("load_weights", {"model_id": model_id, "path": state, "optimizer": True}),
        "load_weights as a new model": (
            "load_weights",
            {"session_id": session_of(url, bob), "model_seq_id": 0, "path": state, "optimizer": False},
        ),
        "create_model in alice's session": (
            "create_model",
            {"session_id": session, "model_seq_id": 0, "base_model": str(tiny_base), "lora_config": {"rank": 4}},
        ),
        "sampling session on alice's sampler": (
            "create_sampling_session",
            {"session_id": session_of(url, bob), "sampling_session_seq_id": 0, "model_path": sampler},
        ),
        "sample alice's sampler": ("asample", sample_body(model_path=sampler)),
        "sample alice's sampling session": ("asample", sample_body(sampling_session_id=ephemeral)),
        "retrieve alice's future": ("retrieve_future", {"request_id": request_id}),
        "heartbeat alice's session": ("session_heartbeat", {"session_id": session}),
        "finish alice's session": (f"sessions/{session}/finish", {}),
    }
    answers = {what: post(url, route, bob, body) for what, (route, body) in attempts.items()}
    answers["forward_backward"] = post(url, "forward_backward", bob, content=fwd_body(model_id, TOKENS))
    answers["get_sampler"] = httpx.get(f"{url}/api/v1/samplers/{ephemeral}", headers={"X-API-Key": "tml-" + bob})
    # each a 404 in the SDK's shape, as for nothing there: no answer confirms alice's object exists
    refused = {what: r.status_code for what, r in answers.items() if not is_sdk_error(r, 404)}
    assert refused == {}, refused

    # the SDK raises its own not-found error for bob
    bob_client = sdk(url, bob)
    with pytest.raises(tinker.NotFoundError):
        bob_client.create_training_client_from_state(state).result()
    with pytest.raises(tinker.NotFoundError):
        bob_client.create_sampling_client(model_path=sampler).result()

    # nothing of alice's changed, and her client still trains and reads its own future
    after = sorted((p, p.stat().st_mtime_ns) for p in (app.state.jobs.root / model_id).rglob("*") if p.is_file())
    assert after == saved
    assert wait_result(url, alice, request_id)["metrics"]
    assert trainer.forward_backward([text_datum(TOKENS)], "cross_entropy").result().metrics["loss:sum"] > 0


def sample_body(**where) -> dict:
    return {
        "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": TOKENS[:4]}]},
        "sampling_params": {"max_tokens": 2, "temperature": 0.0},
        **where,
    }


@pytest.mark.parametrize("session", ["ABSOLUTE", "../../../escaped", "session-abcdefabcdef/../../escaped"])
def test_a_session_id_never_becomes_a_path(deployment, tiny_base, tmp_path, session):
    url, alice, _, app, _ = deployment
    session = str(tmp_path / "escaped") if session == "ABSOLUTE" else session
    r = post(url, "create_model", alice, {"session_id": session, "model_seq_id": 0, "base_model": str(tiny_base)})
    if r.status_code == 200:  # taken: a save under it lands where the session id points
        wait_result(url, alice, r.json()["request_id"])
        saving = post(url, "save_weights", alice, {"model_id": f"{session}:train:0", "path": "x"})
        wait_result(url, alice, saving.json()["request_id"])
    assert is_sdk_error(r, 404), r.text
    state = app.state.jobs.root.parent
    escaped = [p for p in (tmp_path, state, state.parent) for p in p.rglob("escaped*")]
    assert escaped == []


def test_checkpoint_names_and_tinker_paths_stay_inside_the_state_dir(deployment, tmp_path):
    url, alice, _, app, trainer = deployment
    for name in ("../../outside", "/tmp/outside", "a/b", ".hidden", ".."):
        r = post(url, "save_weights", alice, {"model_id": trainer.model_id, "path": name})
        assert is_sdk_error(r, 400), (name, r.text)
    session = session_of(url, alice)
    for path in (
        f"tinker://{trainer.model_id}/weights/../../../../etc",
        "tinker://..%2F../weights/x",
        f"tinker://{tmp_path}/weights/x",
        "tinker:///etc/passwd",
        f"tinker://{trainer.model_id}/other_kind/x",
    ):
        r = post(
            url,
            "create_sampling_session",
            alice,
            {"session_id": session, "sampling_session_seq_id": 0, "model_path": path},
        )
        assert is_sdk_error(r, 404), (path, r.text)
    assert not [
        p for p in app.state.jobs.root.rglob("*") if not p.resolve().is_relative_to(app.state.jobs.root.resolve())
    ]


# ------------------------------------------------------------------ T3: bad bodies are 400s
JSON_ROUTES = [
    "create_session",
    "session_heartbeat",
    "create_model",
    "get_info",
    "optim_step",
    "save_weights",
    "save_weights_for_sampler",
    "load_weights",
    "create_sampling_session",
    "asample",
    "retrieve_future",
]
BAD_JSON = {
    "not JSON": b"this is not json",
    "invalid UTF-8": b'{"model_id": "\xff\xfe"}',
    "over-deep JSON": b"[" * 100_000 + b"]" * 100_000,
}


def test_bodies_that_are_not_json_are_400s_in_the_sdks_shape(deployment):
    url, alice, *_ = deployment
    wrong = {}
    for route in JSON_ROUTES:
        for what, content in BAD_JSON.items():
            r = post(url, route, alice, content=content, headers={"Content-Type": "application/json"})
            if not is_sdk_error(r, 400):
                wrong[f"{route}: {what}"] = r.status_code
    assert wrong == {}, wrong


def test_forward_backward_bodies_that_lie_are_400s_in_the_sdks_shape(deployment):
    url, alice, _, app, trainer = deployment
    m, n = trainer.model_id, len(TOKENS)
    vocab = app.state.jobs.trainees[m].model.get_input_embeddings().num_embeddings
    csr_past = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[n])
    csr_past.sparse_csr.values = np.ones(1, np.float32).tobytes()
    csr_past.sparse_csr.crow_indices = np.array([0, 1], np.int64).tobytes()
    csr_past.sparse_csr.col_indices = np.array([n + 5], np.int64).tobytes()
    bodies = {
        "bytes not a whole float32": fwd_body(
            m, TOKENS, {"weights": pb.Tensor(dense=b"\0" * 5, dtype=pb.DTYPE_FLOAT32)}
        ),
        "shape not the token count": fwd_body(m, TOKENS, {"weights": tensor([1.0] * 3)}),
        "dense shorter than its shape": fwd_body(m, TOKENS, {"weights": tensor([1.0] * 3, shape=[n])}),
        "CSR index past the shape": fwd_body(m, TOKENS, {"weights": csr_past}),
        "negative shape": fwd_body(m, TOKENS, {"weights": tensor([1.0] * n, shape=[-1])}),
        "unknown dtype": fwd_body(m, TOKENS, {"weights": pb.Tensor(dense=b"\0" * 4 * n, dtype=77)}),  # pyright: ignore[reportArgumentType]
        "token id past the vocabulary": fwd_body(m, TOKENS[:-1] + [vocab]),
        "negative token id": fwd_body(m, [-3] + TOKENS[1:]),
        "target past the vocabulary": fwd_body(
            m, TOKENS, {"target_tokens": tensor(TOKENS[:-1] + [vocab + 9], np.int64)}
        ),
        "not protobuf": b"\xff" * 64,
    }
    answers = {what: post(url, "forward_backward", alice, content=body) for what, body in bodies.items()}
    answers["not zstd"] = post(
        url, "forward_backward", alice, content=b"plain bytes", headers={"Content-Encoding": "zstd"}
    )
    sizeless = zstandard.ZstdCompressor(write_content_size=False).compress(fwd_body(m, TOKENS))
    answers["zstd frame without its size"] = post(
        url, "forward_backward", alice, content=sizeless, headers={"Content-Encoding": "zstd"}
    )
    prompt = sample_body(base_model=app.state.cfg.model)
    prompt["prompt"]["chunks"][0]["tokens"] = [vocab + 1]
    sdk(url, alice).create_sampling_client(base_model=app.state.cfg.model).sample(
        types.ModelInput.from_ints(TOKENS[:3]), 1, types.SamplingParams(max_tokens=1)
    ).result()
    answers["sample prompt past the vocabulary"] = post(url, "asample", alice, prompt)
    wrong = {what: (r.status_code, r.text[:160]) for what, r in answers.items() if not is_sdk_error(r, 400)}
    assert wrong == {}, wrong


def test_token_ids_outside_the_vocabulary_are_refused_in_one_line_and_every_key_is_served_after(deployment, tiny_base):
    """Through the official client: an input id == vocab or < 0 (forward, forward_backward, sample,
    compute_logprobs) fails that call with one line naming the field, the id, its position and the
    vocabulary; ids 0 and vocab-1 pass; bob's calls and alice's next ones are answered after."""
    url, alice, bob, app, trainer = deployment
    vocab = app.state.jobs.trainees[trainer.model_id].model.get_input_embeddings().num_embeddings
    edges = [0, 5, vocab - 1, 7]
    sampler = sdk(url, alice).create_sampling_client(base_model=str(tiny_base)).result()
    calls = {
        "forward": lambda ids: trainer.forward([text_datum(ids)], "cross_entropy").result(),
        "forward_backward": lambda ids: trainer.forward_backward([text_datum(ids)], "cross_entropy").result(),
        "sample": lambda ids: sampler.sample(
            types.ModelInput.from_ints(ids), 1, types.SamplingParams(max_tokens=1, temperature=0.0)
        ).result(),
        "compute_logprobs": lambda ids: sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result(),
    }
    field = {"sample": "sample: prompt", "compute_logprobs": "sample: prompt"}
    for name, call in calls.items():
        call(edges)
        for bad, at in ((vocab, 2), (-1, 0)):
            ids = list(edges)
            ids[at] = bad
            with pytest.raises(tinker.BadRequestError) as refused:
                call(ids)
            where = field.get(name, "forward_backward: data[0].model_input")
            assert refused.value.body == {  # pyright: ignore[reportAttributeAccessIssue]
                "error": f"{where}: token id {bad} at position {at} is outside the model's vocabulary "
                f"[0, {vocab}) (its input embedding has {vocab} rows)",
                "category": "user",
            }, name
    bobs = sdk(url, bob).create_lora_training_client(base_model=str(tiny_base), rank=4, seed=0).result()
    assert len(bobs.forward([text_datum(edges)], "cross_entropy").result().loss_fn_outputs) == 1
    assert len(trainer.forward([text_datum(edges)], "cross_entropy").result().loss_fn_outputs) == 1
    assert sampler.sample(types.ModelInput.from_ints(edges), 1, types.SamplingParams(max_tokens=1)).result().sequences


# ------------------------------------------------------------------ T5 / T7: sizes and time
def test_token_caps_per_datum_and_per_call_are_400s(deployment):
    url, alice, _, app, trainer = deployment
    cfg = app.state.cfg
    long_datum = fwd_body(trainer.model_id, [40] * (cfg.max_datum_tokens + 1))
    r = post(url, "forward_backward", alice, content=long_datum)
    assert is_sdk_error(r, 400) and "tokens" in r.json()["error"], r.text[:200]
    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(fwd_body(trainer.model_id, [40] * cfg.max_datum_tokens))
    for _ in range(cfg.max_call_tokens // cfg.max_datum_tokens):
        msg.data.add().CopyFrom(msg.data[0])
    r = post(url, "forward_backward", alice, content=msg.SerializeToString())
    assert is_sdk_error(r, 400) and "per call" in r.json()["error"], r.text[:200]


def test_a_long_call_of_one_key_does_not_hold_up_a_short_call_of_another(tiny_base, tmp_path):
    """Liveness bound of the fair scheduler: with 40,000 tokens of alice's training running,
    bob's 8-token forward answers within 2 s, before alice's call is done (it waits for a
    step, not the call). max_call_tokens is raised so that the SDK sends alice's 40,000 tokens
    as one call (its chunks follow the server's cap), which bob's must not wait for."""
    app = create_tinker_app(config(tmp_path, tiny_base, max_call_tokens=262_144))
    alice, bob = (app.state.store.create_key(name)[1] for name in ("alice", "bob"))
    thread = ServerThread(app)
    try:
        trainers = [
            sdk(thread.url, k).create_lora_training_client(base_model=str(tiny_base), rank=4).result()
            for k in (alice, bob)
        ]
        rng = np.random.default_rng(0)
        long = [text_datum(rng.integers(40, 200, 501).tolist()) for _ in range(80)]  # 40,000 input tokens
        short = [text_datum(TOKENS[:9])]
        trainers[1].forward(short, "cross_entropy").result()  # warm
        losses = app.state.jobs.trainees[trainers[0].model_id].losses  # one more once alice's call is done
        running = Accepted(app.state.store, app.state.store.keys()[0].id, "/api/v1/forward_backward")
        trainers[0].forward_backward(long, "cross_entropy")
        running.wait()  # alice's call is queued ahead of bob's (FIFO would run all of it first)
        start = time.monotonic()
        trainers[1].forward(short, "cross_entropy").result()
        waited = time.monotonic() - start
        assert losses == [], "bob's call waited for alice's whole call"
        assert waited < 2.0, f"bob's 8-token call waited {waited:.1f} s behind alice's 40,000 tokens"
    finally:
        app.state.jobs.calls.close()  # as SIGTERM does: alice's call stops, her open poll returns
        thread.stop()


class Accepted:
    """Waits until the server has accepted a new call of `key_id` to `endpoint` (its audit row)."""

    def __init__(self, store: Store, key_id: str, endpoint: str):
        self.store, self.key_id, self.endpoint = store, key_id, endpoint
        self.after = max((r["id"] for r in store.audit_rows(key_id, limit=10**6)), default=0)

    def wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(
            r["endpoint"] == self.endpoint and r["status"] == 200
            for r in self.store.audit_rows(self.key_id, after=self.after)
        ):
            assert time.monotonic() < deadline, f"no {self.endpoint} call of {self.key_id} accepted"
            time.sleep(0.05)


def test_a_call_over_its_time_is_stopped_between_steps_and_leaves_no_gradients(tiny_base, tmp_path):
    app = create_tinker_app(config(tmp_path, tiny_base, call_timeout_s=0.05, step_tokens=500))
    _, secret = app.state.store.create_key("k")
    thread = ServerThread(app)
    try:
        trainer = sdk(thread.url, secret).create_lora_training_client(base_model=str(tiny_base), rank=4).result()
        rng = np.random.default_rng(0)
        data = [text_datum(rng.integers(40, 200, 401).tolist()) for _ in range(30)]  # one SDK chunk
        start = time.monotonic()
        with pytest.raises(tinker.RequestFailedError, match="call_timeout_s"):
            trainer.forward_backward(data, "cross_entropy").result()
        assert time.monotonic() - start < 30
        model = app.state.jobs.trainees[trainer.model_id].model
        assert all(p.grad is None for p in model.parameters() if p.requires_grad)
    finally:
        thread.stop()


def test_a_step_that_never_ends_fails_its_call_within_the_bound_and_the_server_says_it_is_stuck(
    tiny_base, tmp_path, monkeypatch
):
    """The fault battery's hang in the worker's next step: the caller's forward_backward fails with
    one line naming the call and the bound, another key's call is refused without a word of the
    first key's, and the health check answers 503 so a supervisor restarts the server."""
    from tempering.serve.tinker_sched import STUCK

    counters = tmp_path / "faults"
    counters.mkdir()
    monkeypatch.setenv("TEMPERING_FAULTS_DIR", str(counters))
    app = create_tinker_app(config(tmp_path / "state", tiny_base, call_timeout_s=1.0, hang_grace_s=1.0))
    _, first = app.state.store.create_key("first")
    _, second = app.state.store.create_key("second")
    thread = ServerThread(app)
    try:
        trainer = sdk(thread.url, first).create_lora_training_client(base_model=str(tiny_base), rank=4).result()
        other = sdk(thread.url, second).create_lora_training_client(base_model=str(tiny_base), rank=4).result()
        steps_so_far = int((counters / "tinker_worker.count").read_text())
        monkeypatch.setenv("TEMPERING_FAULTS", f"tinker_worker:hang:{steps_so_far + 1}")
        assert httpx.get(f"{thread.url}/api/v1/healthz").status_code == 200
        datum = text_datum(list(range(40, 60)))
        with pytest.raises(tinker.RequestFailedError) as stuck:
            trainer.forward_backward([datum], "cross_entropy").result(timeout=60)
        message = str(stuck.value)
        assert "forward_backward: tinker worker stuck: a step gave no answer after" in message
        assert "call_timeout_s 1 s + grace 1 s" in message
        with pytest.raises(Exception) as refused:  # refused at submit: the SDK's error for a 4xx answer
            other.forward_backward([datum], "cross_entropy").result(timeout=60)
        assert STUCK in str(refused.value) and "gave no answer" not in str(refused.value)
        health = httpx.get(f"{thread.url}/api/v1/healthz")
        assert health.status_code == 503 and health.json()["status"] == "stuck"
    finally:
        monkeypatch.delenv("TEMPERING_FAULTS")
        thread.stop()


def test_training_clients_are_capped_per_key_and_in_all(tiny_base, tmp_path):
    app = create_tinker_app(config(tmp_path, tiny_base, max_models_per_key=2, max_models=3, max_lora_rank=8))
    a, b = (app.state.store.create_key(n)[1] for n in ("a", "b"))
    thread = ServerThread(app)
    try:
        ca, cb = sdk(thread.url, a), sdk(thread.url, b)
        with pytest.raises(tinker.BadRequestError, match=r"LoRA rank 9 is outside 1\.\.8"):
            ca.create_lora_training_client(base_model=str(tiny_base), rank=9).result()
        for _ in range(2):
            ca.create_lora_training_client(base_model=str(tiny_base), rank=2).result()
        with pytest.raises(tinker.BadRequestError, match="max_models_per_key") as err:
            ca.create_lora_training_client(base_model=str(tiny_base), rank=2).result()
        assert "\n" not in err.value.body["error"]  # type: ignore[index]
        cb.create_lora_training_client(base_model=str(tiny_base), rank=2).result()
        with pytest.raises(tinker.BadRequestError, match=r"\(max_models\)"):
            cb.create_lora_training_client(base_model=str(tiny_base), rank=2).result()
        ca.close("success").result()  # finishing a session frees its clients
        cb.create_lora_training_client(base_model=str(tiny_base), rank=2).result()
    finally:
        thread.stop()


# ------------------------------------------------------------------ a server subprocess
class Served:
    """`temper tinker serve` as a subprocess on a free loopback port, with keys a and b."""

    def __init__(self, state: Path, model: Path, keys: dict[str, str] | None = None):
        self.state, self.model = state, model
        if keys is None:
            store = Store(state / "serve.sqlite")
            keys = {n: store.create_key(n)[1] for n in ("a", "b")}
        self.keys = keys
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / f"server-{self.port}.log"
        cmd = [sys.executable, "-m", "tempering.cli", "tinker", "serve", "--state", str(state)]
        cmd += ["--port", str(self.port), "--model", str(model), "--precision", "fp32"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                break
        raise RuntimeError(f"the server did not start: {self.log.read_text()[-2000:]}")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS

    def rss_mb(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise KeyError(field)

    def stop(self) -> float:
        """SIGTERM; seconds until it exited (killed after 60)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.monotonic() - start


@pytest.fixture(scope="module")
def served(tiny_base, tmp_path_factory):
    server = Served(tmp_path_factory.mktemp("tinker_served"), tiny_base)
    trainer = sdk(server.url, server.keys["a"]).create_lora_training_client(base_model=str(tiny_base), rank=4).result()
    trainer.forward_backward([text_datum(TOKENS)], "cross_entropy").result()  # warm: the first call's allocations
    yield server, trainer
    if server.proc.poll() is None:
        server.stop()


def zstd_bomb(declared: int) -> bytes:
    """A small zstd frame that declares and holds `declared` zero bytes."""
    chunks = zstandard.ZstdCompressor(level=1).compressobj(size=declared)
    zero, out = bytes(MB), bytearray()
    for _ in range(declared // MB):
        out += chunks.compress(zero)
    return bytes(out + chunks.flush())


def huge_sparse(model_id: str, entries: int = 50_000) -> bytes:
    """A CSR loss input whose shape is 50,000 float pages long, with one entry on each page."""
    body = pb.ForwardBackwardRequest()
    body.ParseFromString(fwd_body(model_id, TOKENS))
    t = body.data[0].loss_fn_inputs["weights"]
    t.Clear()
    t.dtype, t.shape[:] = pb.DTYPE_FLOAT32, [entries * 1024]
    t.sparse_csr.values = np.ones(entries, np.float32).tobytes()
    t.sparse_csr.crow_indices = np.array([0, entries], np.int64).tobytes()
    t.sparse_csr.col_indices = (np.arange(entries, dtype=np.int64) * 1024).tobytes()
    return body.SerializeToString()


def test_memory_bombs_are_400s_and_the_server_grows_under_100_mb(served, tiny_base):
    """A zstd body declaring 1 GiB, a 50,000-page sparse tensor, a LoRA of rank 400,000: each a
    400 in the SDK's shape, and the server's peak RSS grows by under 100 MB."""
    server, trainer = served
    a = server.keys["a"]
    session = session_of(server.url, a)
    attacks = {
        "zstd bomb": lambda: post(
            server.url,
            "forward_backward",
            a,
            content=zstd_bomb(1 << 30),
            headers={"Content-Encoding": "zstd"},
        ),
        "huge sparse tensor": lambda: post(server.url, "forward_backward", a, content=huge_sparse(trainer.model_id)),
        "rank 400000": lambda: post(
            server.url,
            "create_model",
            a,
            {"session_id": session, "model_seq_id": 7, "base_model": str(tiny_base), "lora_config": {"rank": 400_000}},
        ),
    }
    grown = {}
    for what, attack in attacks.items():
        server.reset_peak()
        before = server.rss_mb("VmRSS")
        r = attack()
        if r.status_code == 200 and "request_id" in r.json():  # accepted: let it run, then measure
            wait_result(server.url, a, r.json()["request_id"], timeout=300)
        grown[what] = (r.status_code if is_sdk_error(r, 400) else r.text[:160], round(server.rss_mb("VmHWM") - before))
    assert all(status == 400 and mb < 100 for status, mb in grown.values()), grown


@pytest.fixture(scope="module")
def restarted(served, tiny_base):
    """The `served` server (after the memory test, which runs first) with key a's client saved,
    stopped by SIGTERM in the middle of a long call, then started again on the same state:
    (server, seconds to exit, a's model id, a's state path)."""
    first, trainer = served
    saved = trainer.save_state("kept").result().path
    rng = np.random.default_rng(0)
    long = [text_datum(rng.integers(40, 200, 1001).tolist()) for _ in range(40)]
    store = Store(first.state / "serve.sqlite")
    running = Accepted(store, store.keys()[0].id, "/api/v1/forward_backward")
    trainer.forward_backward(long, "cross_entropy")
    running.wait()
    time.sleep(1.0)  # the call is running
    seconds = first.stop()
    second = Served(first.state, tiny_base, first.keys)
    yield second, seconds, trainer.model_id, saved
    second.stop()


def test_sigterm_during_a_call_exits_within_5_s(restarted):
    _, seconds, _, _ = restarted
    assert seconds < 5, f"the server took {seconds:.1f} s to exit after SIGTERM"


def test_after_a_restart_saved_states_are_their_owners_and_lost_clients_are_named(restarted, tiny_base):
    server, _, model_id, saved = restarted
    a, b = server.keys["a"], server.keys["b"]
    assert model_id in server.log.read_text()  # the startup line names the lost client
    r = post(server.url, "get_info", a, {"model_id": model_id})
    assert is_sdk_error(r, 404) and "lost when the server restarted" in r.json()["error"] and saved in r.json()["error"]
    r = post(server.url, "get_info", b, {"model_id": model_id})
    assert is_sdk_error(r, 404) and "lost" not in r.json()["error"]
    resumed = sdk(server.url, a).create_training_client_from_state(saved).result()
    assert resumed.forward([text_datum(TOKENS)], "cross_entropy").result().metrics["loss:sum"] > 0
    with pytest.raises(tinker.NotFoundError):
        sdk(server.url, b).create_training_client_from_state(saved).result()
