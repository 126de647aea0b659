"""The routes of `temper tinker serve` (see `tinker.py`): the calls the SDK's ServiceClient,
TrainingClient and SamplingClient make, validated with the SDK's own request types.

Every route that names an object checks, before it queues anything, that the object is the
calling key's (`tinker_owners.py`: another key's is a 404, as for none); a body that is not
the request (bad JSON, bad bytes, over a cap) is a 400 (`tinker.py` answers `UserError`s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from tempering import errors
from tempering.batches import check_token_ids, embedding_rows
from tempering.serve.protocol import ApiError
from tempering.serve.store import ApiKey
from tempering.serve.tinker_ops import (
    UserError,
    check_tokens,
    forward_backward_steps,
    load_state,
    optim_step,
    save_for_sampler,
    save_state,
    state_meta,
)
from tempering.serve.tinker_owners import SamplingSession
from tempering.serve.tinker_wire import (
    WireLimits,
    read_forward_backward,
    write_forward_backward,
    write_sample,
)

UNSUPPORTED = (
    "create_custom_loss",
    "copy_weights",
    "save_weights_external",
    "join_sampling_session",
    "retrieve_futures",
    "cancel_future",
    "unload_model",
    "auth/token",
)
"""Tinker API calls this server refuses (400, naming the call); any other unknown path too."""
SAMPLE_OPTIONS = (
    "topk_prompt_logprobs",
    "topk_sample_logprobs",
    "target_prompt_logprobs",
    "prompt_alt_tokens_k",
    "prompt_logprobs_last_n",
)
"""Sample request fields this server does not compute: set (non-zero), they are refused."""


def parse(model: Any, body: bytes, call: str) -> Any:
    """`body` (JSON bytes) validated by the SDK's request type; a 400 naming the first bad field.
    Not JSON, not UTF-8, or nested past pydantic's depth limit: a 400 too (pydantic's parser)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiError(400, f"{call}: {where}: {first.get('msg')}") from None


async def read(request: Request, model: Any, call: str) -> Any:
    return parse(model, await request.body(), call)


def outcome(future: Any) -> Response:
    """A finished call's answer: protobuf bytes, JSON, or the SDK's failure shape."""
    exc = future.exception()
    if isinstance(exc, errors.UserError):
        return JSONResponse({"error": str(exc), "category": "user"})
    if exc is not None:
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}", "category": "server"})
    result = future.result()
    if isinstance(result, bytes):
        return Response(result, media_type="application/x-protobuf")
    return JSONResponse(result)


def _tokens(model_input: Any, call: str) -> list[int]:
    tokens: list[int] = []
    for chunk in model_input.chunks:
        if getattr(chunk, "type", None) != "encoded_text":
            raise ApiError(400, f"{call}: only text chunks are supported (got {getattr(chunk, 'type', chunk)})")
        tokens += list(chunk.tokens)
    return tokens


async def _in_thread(fn: Callable, *args: Any) -> Any:
    """`fn(*args)` off the event loop (file-system checks, parsing)."""
    return await run_in_threadpool(fn, *args)


def add_routes(app: FastAPI, server: Any) -> None:
    """Session, training, weights, sampling and future routes on `app`."""
    _session_routes(app, server)
    _training_routes(app, server)
    _weights_routes(app, server)
    _sampling_routes(app, server)

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.FutureRetrieveRequest, "retrieve_future")
        try:
            future = await server.jobs.calls.wait(req.request_id, key.id, server.cfg.poll_s)
        except KeyError:
            raise ApiError(404, f"retrieve_future: no request {req.request_id!r} on this server") from None
        if future is None:
            return {"type": "try_again", "request_id": req.request_id, "queue_state": "active"}
        return outcome(future)

    @app.api_route("/api/v1/{call:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def unsupported(call: str, key: ApiKey = Depends(server.authorized)):
        known = " (a Tinker API call)" if call in UNSUPPORTED else ""
        raise ApiError(400, f"{call}{known} is not supported by temper tinker serve")


def _session_routes(app: FastAPI, server: Any) -> None:
    cfg, owners = server.cfg, server.jobs.owners

    @app.post("/api/v1/client/config")
    async def client_config(key: ApiKey = Depends(server.authorized)):
        # API keys only; one datum chunk at a time, each under the body cap, and (at 4 bytes
        # a token at least, by the SDK's own estimate) under the tokens-per-call cap.
        return {
            "pjwt_auth_enabled": False,
            "parallel_fwdbwd_chunks": False,
            "proto_compress_fwdbwd": False,
            "fwdbwd_max_chunk_bytes_count": min(cfg.max_body_bytes // 4, cfg.max_call_tokens * 4),
        }

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(key: ApiKey = Depends(server.authorized)):
        return {}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        await read(request, types.CreateSessionRequest, "create_session")
        return {"type": "create_session", "session_id": owners.open_session(key.id)}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.SessionHeartbeatRequest, "session_heartbeat")
        owners.session(req.session_id, key.id, "session_heartbeat")
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str, key: ApiKey = Depends(server.authorized)):
        # the session's training clients are released (their saved checkpoints stay)
        server.jobs.drop(owners.finish(session_id, key.id))
        return None

    @app.post("/api/v1/telemetry")
    async def telemetry(key: ApiKey = Depends(server.authorized)):
        return {"status": "accepted"}  # the SDK's usage events: not kept

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities(key: ApiKey = Depends(server.authorized)):
        served = server.jobs.served()
        return {"supported_models": [{"model_name": m, "trainable": True, "sampleable": True} for m in served]}


def _training_routes(app: FastAPI, server: Any) -> None:
    jobs, cfg = server.jobs, server.cfg
    limits = WireLimits(cfg.max_body_bytes, cfg.max_datum_tokens, cfg.max_call_tokens)

    @app.post("/api/v1/create_model")
    async def create_model(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.CreateModelRequest, "create_model")
        if req.optimizer_config.type != "adamw":
            raise ApiError(400, f"create_model: optimizer {req.optimizer_config.type!r} is not supported (adamw is)")
        lora = req.lora_config or types.LoraConfig(rank=32)
        if not 1 <= lora.rank <= cfg.max_lora_rank:
            raise ApiError(
                400, f"create_model: LoRA rank {lora.rank} is outside 1..{cfg.max_lora_rank} (max_lora_rank)"
            )
        base = await _in_thread(jobs.base_model, req.base_model, "create_model")
        model_id = jobs.owners.reserve(key.id, req.session_id, req.model_seq_id, base, "create_model")
        parts = {"train_attn": lora.train_attn, "train_mlp": lora.train_mlp, "train_unembed": lora.train_unembed}
        run = lambda: jobs.create(model_id, base, lora.rank, lora.seed, parts)  # noqa: E731
        return _queue_new(server, request, "create_model", run, model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.GetInfoRequest, "get_info")
        jobs.owners.model(req.model_id, key.id, "get_info")
        trainee = jobs.trainees.get(req.model_id)
        if trainee is None:  # still being created
            raise ApiError(404, f"get_info: no training client {req.model_id!r} on this server")
        return {
            "type": "get_info",
            "model_id": req.model_id,
            "model_data": {
                "arch": trainee.model.config.model_type,
                "model_name": trainee.base,
                "tokenizer_id": str(Path(trainee.tokenizer.name_or_path).resolve()),
            },
            "is_lora": True,
            "lora_rank": trainee.rank,
            "model_name": trainee.base,
        }

    @app.post("/api/v1/forward_backward")
    async def fwd_bwd(request: Request, key: ApiKey = Depends(server.authorized)):
        encoding = request.headers.get("content-encoding")
        req = await _in_thread(read_forward_backward, await request.body(), encoding, limits)
        jobs.owners.model(req.model_id, key.id, "forward_backward")
        if req.model_id in jobs.trainees:
            await _in_thread(check_tokens, req.data, embedding_rows(jobs.trainees[req.model_id].model))

        def run():
            trainee = jobs.trainee(req.model_id, "forward_backward")
            recorded = lambda i, d: jobs.records.sampled(key.id, i, d)  # noqa: E731  (i: the datum's index in the call)
            steps = forward_backward_steps(
                trainee, req.loss_fn, req.data, req.config, req.forward_only, cfg.step_tokens, recorded
            )
            outputs, metrics = yield from steps
            return write_forward_backward(outputs, metrics)

        return server.queue(request, "forward_backward", run, model_id=req.model_id)

    @app.post("/api/v1/optim_step")
    async def optim(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.OptimStepRequest, "optim_step")
        jobs.owners.model(req.model_id, key.id, "optim_step")
        p = req.optim_params
        if not isinstance(p, types.AdamParams):
            raise ApiError(400, f"optim_step: optimizer params of type {p.type!r} are not supported (Adam's are)")

        def run() -> dict:
            trainee = jobs.trainee(req.model_id, "optim_step")
            return {
                "metrics": optim_step(
                    trainee, p.learning_rate, (p.beta1, p.beta2), p.eps, p.weight_decay, p.grad_clip_norm
                )
            }

        return server.queue(request, "optim_step", run, model_id=req.model_id)


def _weights_routes(app: FastAPI, server: Any) -> None:
    jobs, owners = server.jobs, server.jobs.owners

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.SaveWeightsRequest, "save_weights")
        owners.model(req.model_id, key.id, "save_weights")
        if req.path is not None:
            owners.save_dir(req.model_id, "weights", req.path, "save_weights")  # a bad name is a 400 now

        def run() -> dict:
            trainee = jobs.trainee(req.model_id, "save_weights")
            out, path = owners.save_dir(
                req.model_id, "weights", req.path or f"step-{trainee.steps:06d}", "save_weights"
            )
            if out.exists() and not req.overwrite:
                raise UserError(f"save_weights: a checkpoint {path} exists (overwrite=True replaces it)")
            jobs.record(req.model_id, "state", save_state(trainee, out))
            return {"path": path, "type": "save_weights"}

        return server.queue(request, "save_weights", run, model_id=req.model_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampling(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        call = "save_weights_for_sampler"
        req = await read(request, types.SaveWeightsForSamplerRequest, call)
        record = owners.model(req.model_id, key.id, call)
        if req.kind != "snapshot":
            raise ApiError(400, f"{call}: kind {req.kind!r} is not supported (snapshot is)")
        if req.path is not None:
            owners.save_dir(req.model_id, "sampler_weights", req.path, call)

        def run() -> dict:
            trainee = jobs.trainee(req.model_id, call)
            name = req.path or f"ephemeral-{trainee.steps:06d}-{_hex()}"
            out, path = owners.save_dir(req.model_id, "sampler_weights", name, call)
            save_for_sampler(trainee, out)
            if req.path is None:
                session = SamplingSession(key.id, record.session, str(out), trainee.base, path)
                return {"type": call, "sampling_session_id": owners.open_sampling(session)}
            jobs.record(req.model_id, "sampler", out)
            return {"type": call, "path": path}

        return server.queue(request, call, run, model_id=req.model_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.LoadWeightsRequest, "load_weights")
        src = await _in_thread(owners.checkpoint, req.path, key.id, "load_weights")
        if req.model_id is not None:
            model_id = owners.model(req.model_id, key.id, "load_weights").model_id
            create = None
        else:  # create-via-load: a new model of the checkpoint's base and rank
            meta = await _in_thread(state_meta, src, "load_weights")
            base = await _in_thread(jobs.base_model, req.base_model or meta["base"], "load_weights")
            model_id = owners.reserve(key.id, req.session_id or "", req.model_seq_id or 0, base, "load_weights")
            create = (base, meta["rank"], meta["parts"])

        def run() -> dict:
            if create is not None:
                jobs.create(model_id, create[0], create[1], None, create[2])
            load_state(jobs.trainee(model_id, "load_weights"), src, req.optimizer)
            return {"type": "load_weights", "path": req.path, "model_id": model_id}

        if create is None:
            return server.queue(request, "load_weights", run, model_id=model_id)
        return _queue_new(server, request, "load_weights", run, model_id)


def _queue_new(server: Any, request: Request, call: str, run: Callable[[], Any], model_id: str) -> dict:
    """Queue the creation of the reserved training client `model_id`; refused, it is released."""
    try:
        return server.queue(request, call, run, model_id=model_id)
    except BaseException:
        server.jobs.owners.release(model_id)
        raise


def _sampling_routes(app: FastAPI, server: Any) -> None:
    jobs, cfg, owners = server.jobs, server.cfg, server.jobs.owners

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        call = "create_sampling_session"
        req = await read(request, types.CreateSamplingSessionRequest, call)
        owners.session(req.session_id, key.id, call)
        if req.model_path:
            path = await _in_thread(owners.checkpoint, req.model_path, key.id, call)
            session = SamplingSession(key.id, req.session_id, str(path), jobs.base_of(path), req.model_path)
        elif req.base_model:
            base = await _in_thread(jobs.base_model, req.base_model, call)
            session = SamplingSession(key.id, req.session_id, base, base, None)
        else:
            raise ApiError(400, f"{call}: give model_path or base_model")
        return {"type": call, "sampling_session_id": owners.open_sampling(session)}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str, key: ApiKey = Depends(server.authorized)):
        session = owners.sampling(sampler_id, key.id, "get_sampler")
        return {"sampler_id": sampler_id, "base_model": session.base, "model_path": session.path}

    @app.post("/api/v1/asample")
    async def asample(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = await read(request, types.SampleRequest, "sample")
        for option in SAMPLE_OPTIONS:
            if getattr(req, option):
                raise ApiError(400, f"sample: {option} is not supported by temper tinker serve")
        if not 1 <= req.num_samples <= cfg.max_samples:
            raise ApiError(400, f"sample: num_samples {req.num_samples} is outside 1..{cfg.max_samples} (max_samples)")
        if req.sampling_session_id:
            spec = owners.sampling(req.sampling_session_id, key.id, "sample").spec
        elif req.model_path:
            spec = str(await _in_thread(owners.checkpoint, req.model_path, key.id, "sample"))
        elif req.base_model:
            spec = await _in_thread(jobs.base_model, req.base_model, "sample")
        else:
            raise ApiError(400, "sample: give sampling_session_id, model_path or base_model")
        prompt, params = _tokens(req.prompt, "sample"), req.sampling_params.model_dump()
        if not 1 <= len(prompt) <= cfg.max_datum_tokens:
            raise ApiError(
                400, f"sample: the prompt has {len(prompt)} tokens; this server takes 1 to {cfg.max_datum_tokens}"
            )
        if spec in jobs.vocab:
            check_token_ids(prompt, jobs.vocab[spec], "sample: prompt")
        ids = [f"seq-{_hex()}" for _ in range(req.num_samples)]

        def run() -> bytes:
            sampler = jobs.sampler(spec)
            samples, prompt_logprobs = sampler.sample(
                prompt, req.num_samples, params, bool(req.prompt_logprobs), cfg.max_tokens
            )
            if req.record_stability_info:  # what stable_reinforce trains on (`tinker_records.py`)
                jobs.records.record(key.id, ids, prompt, samples)
            return write_sample(samples, prompt_logprobs)

        return server.queue(request, "sample", run, sample_sequence_ids=ids)


def _hex() -> str:
    import uuid

    return uuid.uuid4().hex[:12]
