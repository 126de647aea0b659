"""The FastAPI app of `temper serve`: OpenAI routes, feedback, audit, health, metrics, arena.

    app = create_app(ServeConfig(...))          # uvicorn.run(app, host=..., port=...)

Every route but `/health`, `/metrics` and the arena page needs `Authorization: Bearer <key>`
(a key of `temper keys create`), checked by the gate (`gate.py`) before the body is read;
the gate also caps the body's size and names each request's route template for the metrics.
Each answered request appends an audit row before its response (or its first stream chunk)
leaves, so a client that got an answer has its row; a token-by-token stream (`live.py`)
appends it when the answer completes, before its finish chunk, or with status 499 when the
client leaves first (in a `finally`). Every answer's row names the release that gave it (None
only for the configured default model), and with `capture_tokens` its token ids (`capture.py`). A key's rate-limited requests are counted, not audited
one by one (`RefusalCounter`). Errors have OpenAI's shape and status codes; a bad request is
a 4xx, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections import defaultdict, deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, AsyncGenerator, Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException

from tempering.serve import arena, capture, chat, live
from tempering.serve.backend import Models, Route, Served, UnknownModel
from tempering.serve.config import ServeConfig
from tempering.serve.gate import UNMATCHED, Gate
from tempering.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, FeedbackRequest
from tempering.serve.store import ApiKey, Store, StoreError
from tempering.serve.vision import ImageLimits

UNKNOWN_KEY = "-"
"""The audit log's key id for requests refused without a known key."""


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else ""


class RateLimiter:
    """Sliding one-minute window of request times per key (and of refused requests per client
    address, so unauthenticated floods neither pass nor fill the audit log)."""

    def __init__(self, default_per_minute: int):
        self.default = default_per_minute
        self._seen: dict[str, deque] = defaultdict(deque)

    def allow(self, ident: str, limit: int) -> bool:
        """Count one request of `ident`; False when it already made `limit` in the last minute."""
        now, seen = time.monotonic(), self._seen[ident]
        while seen and now - seen[0] >= 60.0:
            seen.popleft()
        if len(seen) >= limit:
            return False
        seen.append(now)
        return True

    def check(self, key: ApiKey) -> None:
        limit = key.rate_limit or self.default
        if not self.allow(key.id, limit):
            raise ApiError(
                429, f"Rate limit reached for key {key.name}: {limit} requests per minute", "rate_limit_exceeded"
            )


class RefusalCounter:
    """Rate-limited (429) requests of valid keys: counted in memory and audited as at most one
    row per key every `interval` seconds, whose `request.refused` is how many 429s it stands
    for (itself and the uncounted ones before it); `flush` writes what is left at shutdown.
    So a client hammering past its limit costs no synced disk write per request, and no
    refusal goes uncounted (a `kill -9` loses at most one interval's count)."""

    def __init__(self, interval: float):
        self.interval = interval
        self._pending: dict[str, list] = {}  # key id -> [count, endpoint]; one entry per valid key at most
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, key_id: str, endpoint: str) -> int:
        """Count one 429; the number of refusals to audit now (0: not yet)."""
        with self._lock:
            entry = self._pending.setdefault(key_id, [0, endpoint])
            entry[0], entry[1] = entry[0] + 1, endpoint
            now = time.monotonic()
            if now - self._last.get(key_id, -self.interval) < self.interval:
                return 0
            self._last[key_id] = now
            return self._pending.pop(key_id)[0]

    def flush(self) -> list[tuple[str, str, int]]:
        """(key id, last endpoint, count) of every refusal not audited yet; the counts restart."""
        with self._lock:
            left, self._pending = self._pending, {}
        return [(key_id, endpoint, count) for key_id, (count, endpoint) in left.items()]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tempering_requests", "Requests answered", ["endpoint", "status"], registry=self.registry
        )
        self.tokens = Counter("tempering_tokens", "Tokens processed", ["kind"], registry=self.registry)
        self.latency = Histogram(
            "tempering_request_seconds",
            "Request latency",
            ["endpoint"],
            registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )


@dataclass
class Server:
    """What the routes share: the deployment's config, models, store, rate limiter and metrics."""

    cfg: ServeConfig
    models: Models
    store: Store
    limiter: RateLimiter
    metrics: Metrics
    refusals: RefusalCounter = field(init=False)
    images: ImageLimits = field(init=False)

    def __post_init__(self) -> None:
        self.refusals = RefusalCounter(self.cfg.refused_audit_s)
        self.images = ImageLimits(self.cfg.max_images, self.cfg.max_image_pixels)

    def error(self, request: Request, exc: ApiError) -> JSONResponse:
        """An error response in OpenAI's shape; audited. A key's 429s are counted
        (`RefusalCounter`). A refused key (401) is filed under the key it names when that key
        exists but is revoked, else under `UNKNOWN_KEY`, with the client's address; past
        `rate_limit` refusals a minute from one address the answer is a 429, not audited."""
        self.metrics.requests.labels(endpoint_of(request), str(exc.status)).inc()
        key = getattr(request.state, "key", None)
        if key is not None and exc.status == 429:
            if refused := self.refusals.note(key.id, request.url.path):
                self.store.audit(key.id, request.url.path, 429, request={"refused": refused})
        elif key is not None:
            self.store.audit(key.id, request.url.path, exc.status)
        elif exc.status == 401:
            client = request.client.host if request.client else "unknown"
            if not self.limiter.allow(f"refused:{client}", self.limiter.default):
                exc = ApiError(
                    429,
                    f"Too many refused requests from {client}: {self.limiter.default} per minute",
                    "rate_limit_exceeded",
                )  # not audited: the 401s before it are
                return JSONResponse(exc.body(), status_code=429, headers={"Retry-After": "60"})
            named = self.store.key_of(_bearer(request))
            self.store.audit(
                named.id if named else UNKNOWN_KEY,
                request.url.path,
                401,
                request={
                    "client": request.client.host if request.client else None,
                    "reason": "revoked key" if named else "no or unknown key",
                },
            )
        return JSONResponse(
            exc.body(), status_code=exc.status, headers={"Retry-After": "60"} if exc.status == 429 else None
        )

    def authorized(self, request: Request) -> ApiKey:
        """The request's key, checked by the gate before the body was read (a FastAPI dependency;
        the gate checks the key of every route that has it)."""
        key = getattr(request.state, "key", None)
        if key is None:  # a route the gate did not check: refuse rather than serve without a key
            raise ApiError(401, "Missing API key (Authorization: Bearer)", "invalid_api_key")
        return key

    def check_key(self, request: Request) -> ApiKey:
        """The request's live key, put in `request.state.key`: 401 without one, 429 over its rate."""
        secret = _bearer(request)
        key = self.store.authenticate(secret) if secret else None
        if key is None:
            raise ApiError(
                401,
                "Incorrect API key provided" if secret else "Missing API key (Authorization: Bearer)",
                "invalid_api_key",
            )
        request.state.key = key
        self.limiter.check(key)
        return key

    def route_for(self, name: str) -> tuple[Route, Served]:
        """The route and loaded model for a requested model name; 404 for an unknown name."""
        try:
            route = self.models.route(name)
        except UnknownModel as exc:
            raise ApiError(404, str(exc), "model_not_found", "model") from None
        return route, self.models.served(route)

    async def answer(
        self,
        request: Request,
        key: ApiKey,
        req: Any,
        prepare: Callable,
        respond: Callable,
        chunks: Callable,
        prefix: str,
    ) -> Any:
        """Generate, audit (before anything is sent), then answer whole or as an SSE stream.
        A streamed chat answer that can go out token by token (`live.streams_live`) is audited
        when it completes, before its finish chunk."""
        started = time.perf_counter()
        if req.sequences() > self.cfg.max_sequences:
            raise ApiError(
                400,
                f"this request asks for {req.sequences()} sequences (prompts x n); "
                f"this server allows {self.cfg.max_sequences}",
                "invalid_value",
                "n",
            )
        route, served = await run_in_threadpool(self.route_for, req.model)
        # off the event loop: images are decoded and prompts rendered here (serve/vision.py)
        prepared = await run_in_threadpool(prepare, served, req, self.cfg.max_tokens)
        continued = None
        if self.cfg.capture_tokens and respond is chat.chat_response:
            continued = await run_in_threadpool(self.continue_captured, key, req, served, prepared)
        await run_in_threadpool(chat.check_prompt_ids, served, prepared)
        response_id = prefix + secrets.token_hex(12)
        if req.stream and respond is chat.chat_response and live.streams_live(served, req, prepared):
            return EventSourceResponse(
                self.live_events(request, key, req, route, served, prepared, response_id, continued), ping=3600
            )
        groups = await run_in_threadpool(chat.generate, served, prepared, self.cfg.request_timeout_s)
        body = respond(served, req, prepared, groups, response_id, route.name)
        self.record(request, key, req, route, body, started, (prepared, groups, continued))
        if not req.stream:
            return body

        def events():
            for c in chunks(served, req, prepared, groups, response_id, route.name):
                yield {"data": json.dumps(c, ensure_ascii=False)}
            yield {"data": "[DONE]"}

        return EventSourceResponse(events(), ping=3600)

    def continue_captured(self, key: ApiKey, req: Any, served: Served, prepared: Any) -> capture.Continued | None:
        """With `capture_tokens`: a chat history continuing a turn this key was served gets that
        turn's exact ids as its prompt (`prepared` is changed in place), else None (serve/capture.py)."""
        prefill = served.tokenizer.encode(prepared.prefill, add_special_tokens=False) if prepared.prefill else []
        continued = capture.continuation(self.store, key.id, req, served, prefill)
        if continued is not None:
            capture.check_room(continued.prompt_ids, prepared.params.max_new_tokens, served.max_context)
            prepared.prompts = [continued.prompt_ids]
        return continued

    async def live_events(
        self,
        request: Request,
        key: ApiKey,
        req: Any,
        route: Route,
        served: Served,
        prepared: Any,
        response_id: str,
        continued: capture.Continued | None = None,
    ) -> AsyncGenerator[dict[str, str], None]:
        """The SSE events of a token-by-token stream. Audited when the answer completes; if the
        stream ends first (the client left: 499; the engine failed: 500), the `finally` audits
        what is known, so no answered or half-answered request goes unlogged."""
        started, done, status = time.perf_counter(), False, 500

        def finished(groups: list[list[Any]]) -> None:
            nonlocal done
            body = chat.chat_response(served, req, prepared, groups, response_id, route.name)
            self.record(request, key, req, route, body, started, (prepared, groups, continued))
            done = True

        stream = live.chat_stream(served, req, prepared, response_id, route.name, finished, self.cfg.request_timeout_s)
        try:
            async for c in stream:
                yield {"data": json.dumps(c, ensure_ascii=False)}
            yield {"data": "[DONE]"}
        except (asyncio.CancelledError, GeneratorExit):
            status = 499  # nginx's "client closed request"
            raise
        finally:
            await stream.aclose()  # now, not at garbage collection: the engine stops decoding for a client gone
            if not done:
                self.store.audit(
                    key.id,
                    request.url.path,
                    status,
                    model=route.name,
                    release=route.release,
                    prompt_tokens=sum(len(p) for p in prepared.prompts),
                    latency_ms=(time.perf_counter() - started) * 1000,
                    response_id=response_id,
                    request=req.model_dump(exclude_none=True) if self.cfg.log_text else None,
                )
                self.metrics.requests.labels(endpoint_of(request), str(status)).inc()

    def flush_refusals(self) -> None:
        """Audit the rate-limited requests not audited yet (at shutdown)."""
        for key_id, endpoint, count in self.refusals.flush():
            self.store.audit(key_id, endpoint, 429, request={"refused": count})

    def record(
        self,
        request: Request,
        key: ApiKey,
        req: Any,
        route: Route,
        body: dict[str, Any],
        started: float,
        answered: tuple[Any, list[list[Any]], capture.Continued | None],
    ) -> None:
        """Audit row and metrics of an answered request; with `capture_tokens`, its tokens
        (`answered`: the engine input, the completions, the turn it continued) and turn hashes."""
        use, keep = body["usage"], self.cfg.log_text
        prepared, groups, continued = answered
        tokens = capture.captured_tokens(prepared.prompts, groups, continued) if self.cfg.capture_tokens else None
        self.store.audit(
            key.id,
            request.url.path,
            200,
            model=route.name,
            release=route.release,
            prompt_tokens=use["prompt_tokens"],
            completion_tokens=use["completion_tokens"],
            latency_ms=(time.perf_counter() - started) * 1000,
            response_id=body["id"],
            request=req.model_dump(exclude_none=True) if keep else None,
            response=body["choices"] if keep else None,
            tokens=tokens,
        )
        if tokens is not None and body["object"] == "chat.completion":
            self.store.add_turns(key.id, body["id"], capture.served_turn_hashes(req, body))
        self.metrics.requests.labels(endpoint_of(request), "200").inc()
        self.metrics.tokens.labels("prompt").inc(use["prompt_tokens"])
        self.metrics.tokens.labels("completion").inc(use["completion_tokens"])
        self.metrics.latency.labels(endpoint_of(request)).observe(time.perf_counter() - started)


def endpoint_of(request: Request) -> str:
    """The request's route template (set by the gate): the metrics' endpoint label, bounded by the routes."""
    return getattr(request.state, "endpoint", UNMATCHED)


def create_app(cfg: ServeConfig, models: Models | None = None, store: Store | None = None) -> FastAPI:
    """The server for `cfg`; `models` / `store` default to the registry's releases and `cfg.db_path`.

    At startup (before the server accepts a request, so `/health` says ok only then) the
    production or default model is loaded and runs one short generation (`Models.warm_up`;
    `temper serve` calls it before starting the server, so a model that cannot load is a
    one-line error)."""
    server = Server(
        cfg, models or default_models(cfg), store or Store(cfg.db_path), RateLimiter(cfg.rate_limit), Metrics()
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await run_in_threadpool(server.models.warm_up)
        yield
        server.flush_refusals()
        # shutting down: stop the engines, or their threads keep models and KV caches alive
        await run_in_threadpool(server.models.close)

    app = FastAPI(
        title="tempering serve", version="1", description="OpenAI-compatible server over releases", lifespan=lifespan
    )
    app.state.store, app.state.models, app.state.cfg = server.store, server.models, cfg
    app.add_middleware(Gate, server=server)
    _error_handlers(app, server)
    _openai_routes(app, server)
    _account_routes(app, server)
    arena.add_routes(app, cfg, server.models, server.store, server.authorized, server.route_for, server.images)

    @app.get("/arena", response_class=HTMLResponse, include_in_schema=False)
    async def arena_page():
        return arena.PAGE

    @app.get("/health")
    async def health():
        stuck = server.models.stuck(cfg.request_timeout_s)
        if stuck:  # a supervisor restarts a server whose engine step never ends
            return JSONResponse({"status": "stuck", "detail": stuck}, status_code=503)
        return {"status": "ok", "models": [e["id"] for e in await run_in_threadpool(server.models.listing)]}

    @app.get("/metrics")
    async def prometheus():
        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _error_handlers(app: FastAPI, server: Server) -> None:
    app.add_exception_handler(ApiError, server.error)  # type: ignore[arg-type]

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
        return server.error(request, ApiError(400, message, "invalid_request", where))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status_code)
        return server.error(request, ApiError(exc.status_code, str(exc.detail), code))

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        return server.error(request, ApiError(409, str(exc), "conflict"))


def _openai_routes(app: FastAPI, server: Server) -> None:
    authorized = server.authorized

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request, key: ApiKey = Depends(authorized)):
        prepare = partial(chat.prepare_chat, images=server.images)
        return await server.answer(request, key, req, prepare, chat.chat_response, chat.chat_chunks, "chatcmpl-")

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request, key: ApiKey = Depends(authorized)):
        return await server.answer(request, key, req, chat.prepare_text, chat.text_response, chat.text_chunks, "cmpl-")

    @app.get("/v1/models")
    async def list_models(key: ApiKey = Depends(authorized)):
        return {"object": "list", "data": await run_in_threadpool(server.models.listing)}

    @app.get("/v1/models/{name}")
    async def get_model(name: str, key: ApiKey = Depends(authorized)):
        for entry in await run_in_threadpool(server.models.listing):
            if entry["id"] == name:
                return entry
        raise ApiError(404, f"The model `{name}` does not exist", "model_not_found", "model")


def _account_routes(app: FastAPI, server: Server) -> None:
    """Feedback and the audit log: every read filtered by the caller's key."""
    store, authorized = server.store, server.authorized

    @app.get("/v1/audit")
    async def audit(
        limit: int = Query(100, ge=1, le=1000), after: int = Query(0, ge=0, le=2**62), key: ApiKey = Depends(authorized)
    ):
        """This key's audit rows after row `after` (never another key's), oldest first; the log cannot be changed."""
        return {"object": "list", "data": store.audit_rows(key.id, limit, after)}

    @app.post("/v1/feedback")
    async def feedback(req: FeedbackRequest, request: Request, key: ApiKey = Depends(authorized)):
        try:
            task = req.task.model_dump() if req.task else None
            row = store.add_feedback(key.id, req.response_id, req.kind, req.correction, req.comment, task)
        except KeyError:
            raise ApiError(404, f"no response {req.response_id!r} for this key", "not_found", "response_id") from None
        store.audit(key.id, request.url.path, 200, response_id=row["id"])
        return {"object": "feedback", **row}

    @app.get("/v1/feedback")
    async def list_feedback(key: ApiKey = Depends(authorized)):
        return {"object": "list", "data": store.feedback(key.id)}


def default_models(cfg: ServeConfig) -> Models:
    """The models of a deployment: releases from `cfg.registry` (if any), else the default model."""
    from tempering.serve.backend import engine_for

    releases = None
    if cfg.registry:
        from tempering.runs.registry import Registry
        from tempering.runs.releases import Releases

        releases = Releases(Registry(cfg.registry))
    return Models(
        cfg.model,
        releases,
        cfg.canary_share,
        cfg.max_loaded,
        cfg.seed,
        load=lambda spec: engine_for(spec, cfg.precision, cfg.quantize, cfg.engine),
    )
