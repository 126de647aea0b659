"""The routes of `temper serve --tinker` (see `tinker.py`): the calls the SDK's ServiceClient,
TrainingClient and SamplingClient make, validated with the SDK's own request types."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from tempering.serve.protocol import ApiError
from tempering.serve.store import ApiKey
from tempering.serve.tinker_ops import (
    UserError,
    forward_backward,
    load_state,
    optim_step,
    save_for_sampler,
    save_state,
)
from tempering.serve.tinker_wire import WireError, read_forward_backward, write_forward_backward, write_sample

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


def parse(model: Any, body: Any, call: str) -> Any:
    """`body` validated by the SDK's request type; a 400 naming the first bad field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiError(400, f"{call}: {where}: {first.get('msg')}") from None


def outcome(future: Any) -> Response:
    """A finished call's answer: protobuf bytes, JSON, or the SDK's failure shape."""
    exc = future.exception()
    if isinstance(exc, UserError):
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


def add_routes(app: FastAPI, server: Any) -> None:
    """Session, training, weights, sampling and future routes on `app`."""
    _session_routes(app, server)
    _training_routes(app, server)
    _weights_routes(app, server)
    _sampling_routes(app, server)

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.FutureRetrieveRequest, await request.json(), "retrieve_future")
        try:
            future = await server.jobs.futures.wait(req.request_id, server.cfg.poll_s)
        except KeyError:
            raise ApiError(404, f"retrieve_future: no request {req.request_id!r} on this server") from None
        if future is None:
            return {"type": "try_again", "request_id": req.request_id, "queue_state": "active"}
        return outcome(future)

    @app.api_route("/api/v1/{call:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def unsupported(call: str, key: ApiKey = Depends(server.authorized)):
        known = " (a Tinker API call)" if call in UNSUPPORTED else ""
        raise ApiError(400, f"{call}{known} is not supported by temper serve --tinker")


def _session_routes(app: FastAPI, server: Any) -> None:
    cfg = server.cfg

    @app.post("/api/v1/client/config")
    async def client_config(key: ApiKey = Depends(server.authorized)):
        # API keys only; one datum chunk at a time, each well under the body cap.
        return {
            "pjwt_auth_enabled": False,
            "parallel_fwdbwd_chunks": False,
            "proto_compress_fwdbwd": False,
            "fwdbwd_max_chunk_bytes_count": cfg.max_body_bytes // 4,
        }

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(key: ApiKey = Depends(server.authorized)):
        return {}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        parse(types.CreateSessionRequest, await request.json(), "create_session")
        return {"type": "create_session", "session_id": f"session-{_hex()}"}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(key: ApiKey = Depends(server.authorized)):
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str, key: ApiKey = Depends(server.authorized)):
        return None  # sessions hold nothing server-side: training models live until the server stops

    @app.post("/api/v1/telemetry")
    async def telemetry(key: ApiKey = Depends(server.authorized)):
        return {"status": "accepted"}  # the SDK's usage events: not kept

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities(key: ApiKey = Depends(server.authorized)):
        return {"supported_models": [{"model_name": cfg.model, "trainable": True, "sampleable": True}]}


def _training_routes(app: FastAPI, server: Any) -> None:
    jobs = server.jobs

    @app.post("/api/v1/create_model")
    async def create_model(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.CreateModelRequest, await request.json(), "create_model")
        if req.optimizer_config.type != "adamw":
            raise ApiError(400, f"create_model: optimizer {req.optimizer_config.type!r} is not supported (adamw is)")
        lora = req.lora_config or types.LoraConfig(rank=32)
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        parts = {"train_attn": lora.train_attn, "train_mlp": lora.train_mlp, "train_unembed": lora.train_unembed}
        run = lambda: jobs.create(model_id, req.base_model, lora.rank, lora.seed, parts)  # noqa: E731
        return server.queue(request, "create_model", run, model_id=model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.GetInfoRequest, await request.json(), "get_info")
        trainee = jobs.trainees.get(req.model_id)
        if trainee is None:
            raise ApiError(404, f"get_info: no training model {req.model_id!r} on this server")
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
        try:
            req = read_forward_backward(await request.body(), request.headers.get("content-encoding"))
        except WireError as exc:
            raise ApiError(400, str(exc)) from None

        def run() -> bytes:
            trainee = jobs.trainee(req.model_id, "forward_backward")
            recorded = lambda i, d: jobs.records.sampled(key.id, i, d)  # noqa: E731
            outputs, metrics = forward_backward(trainee, req.loss_fn, req.data, req.config, req.forward_only, recorded)
            return write_forward_backward(outputs, metrics)

        return server.queue(request, "forward_backward", run, model_id=req.model_id)

    @app.post("/api/v1/optim_step")
    async def optim(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.OptimStepRequest, await request.json(), "optim_step")
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
    jobs = server.jobs

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.SaveWeightsRequest, await request.json(), "save_weights")

        def run() -> dict:
            trainee = jobs.trainee(req.model_id, "save_weights")
            out, path = jobs.save_dir(req.model_id, "weights", req.path or f"step-{trainee.steps:06d}", "save_weights")
            if out.exists() and not req.overwrite:
                raise UserError(f"save_weights: a checkpoint {path} exists (overwrite=True replaces it)")
            jobs.record(req.model_id, "state", save_state(trainee, out))
            return {"path": path, "type": "save_weights"}

        return server.queue(request, "save_weights", run, model_id=req.model_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampling(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.SaveWeightsForSamplerRequest, await request.json(), "save_weights_for_sampler")
        if req.kind != "snapshot":
            raise ApiError(400, f"save_weights_for_sampler: kind {req.kind!r} is not supported (snapshot is)")

        def run() -> dict:
            trainee = jobs.trainee(req.model_id, "save_weights_for_sampler")
            name = req.path or f"ephemeral-{trainee.steps:06d}-{_hex()}"
            out, path = jobs.save_dir(req.model_id, "sampler_weights", name, "save_weights_for_sampler")
            save_for_sampler(trainee, out)
            if req.path is None:
                session = jobs.open_session(str(out), trainee.base, path)
                return {"type": "save_weights_for_sampler", "sampling_session_id": session}
            jobs.record(req.model_id, "sampler", out)
            return {"type": "save_weights_for_sampler", "path": path}

        return server.queue(request, "save_weights_for_sampler", run, model_id=req.model_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.LoadWeightsRequest, await request.json(), "load_weights")
        model_id = req.model_id or f"{req.session_id}:train:{req.model_seq_id}"

        def run() -> dict:
            src = jobs.resolve(req.path, "load_weights")
            if req.model_id is None:  # create-via-load: a new model of the checkpoint's base and rank
                import json

                meta = (
                    json.loads((src / "tinker_state.json").read_text())
                    if (src / "tinker_state.json").is_file()
                    else None
                )
                if meta is None:
                    raise UserError(f"load_weights: {req.path} is not a training state (save_state writes those)")
                jobs.create(model_id, req.base_model or meta["base"], meta["rank"], None, meta["parts"])
            load_state(jobs.trainee(model_id, "load_weights"), src, req.optimizer)
            return {"type": "load_weights", "path": req.path, "model_id": model_id}

        return server.queue(request, "load_weights", run, model_id=model_id)


def _sampling_routes(app: FastAPI, server: Any) -> None:
    jobs, cfg = server.jobs, server.cfg

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.CreateSamplingSessionRequest, await request.json(), "create_sampling_session")
        if req.model_path:
            path = await _in_thread(jobs.resolve, req.model_path, "create_sampling_session")
            session = jobs.open_session(str(path), jobs.base_of(path), req.model_path)
        elif req.base_model:
            session = jobs.open_session(req.base_model, req.base_model, None)
        else:
            raise ApiError(400, "create_sampling_session: give model_path or base_model")
        return {"type": "create_sampling_session", "sampling_session_id": session}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str, key: ApiKey = Depends(server.authorized)):
        session = jobs.sessions.get(sampler_id)
        if session is None:
            raise ApiError(404, f"get_sampler: no sampling session {sampler_id!r} on this server")
        return {"sampler_id": sampler_id, "base_model": session.base, "model_path": session.path}

    @app.post("/api/v1/asample")
    async def asample(request: Request, key: ApiKey = Depends(server.authorized)):
        from tinker import types

        req = parse(types.SampleRequest, await request.json(), "sample")
        for option in SAMPLE_OPTIONS:
            if getattr(req, option):
                raise ApiError(400, f"sample: {option} is not supported by temper serve --tinker")
        if req.num_samples > cfg.max_samples:
            raise ApiError(400, f"sample: num_samples {req.num_samples} is over this server's cap of {cfg.max_samples}")
        if req.sampling_session_id:
            if req.sampling_session_id not in jobs.sessions:
                raise ApiError(404, f"sample: no sampling session {req.sampling_session_id!r} on this server")
            spec = jobs.sessions[req.sampling_session_id].spec
        elif req.model_path:
            spec = str(await _in_thread(jobs.resolve, req.model_path, "sample"))
        elif req.base_model:
            spec = req.base_model
        else:
            raise ApiError(400, "sample: give sampling_session_id, model_path or base_model")
        prompt, params = _tokens(req.prompt, "sample"), req.sampling_params.model_dump()
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


async def _in_thread(fn: Callable, *args: Any) -> Any:
    from fastapi.concurrency import run_in_threadpool

    try:
        return await run_in_threadpool(fn, *args)
    except UserError as exc:
        raise ApiError(400, str(exc)) from None


def _hex() -> str:
    import uuid

    return uuid.uuid4().hex[:12]
