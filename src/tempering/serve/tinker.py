"""`temper tinker serve`: the Tinker API, so the official `tinker` SDK and `tinker-cookbook`
recipes train and sample on this machine.

    app = create_tinker_app(TinkerServeConfig(...))    # uvicorn.run(app, host=..., port=...)
    # client side: TINKER_BASE_URL=http://127.0.0.1:8000  TINKER_API_KEY=<the key `temper keys create` printed>

The SDK sends its key as `X-API-Key` and insists on a `tml-` prefix, which `temper keys create`
prints; a key made before that prefix (`tmp-...`) is given as `tml-` + the key. The gate
(`gate.py`) checks it before a body is read, as for the OpenAI server, and caps the body's
size. Training and sampling calls answer a request id at once and run on one worker thread,
fairly across keys (`tinker_sched.py`); `retrieve_future` returns the result, `try_again`
while it runs, or the SDK's failure shape `{"error", "category"}` (a bad request is category
`user`). Everything a key makes is its own (`tinker_owners.py`; recorded samples,
`tinker_records.py`): another key gets a 404 (or, for a record, "no record of"). A refused
request is the same shape with its status: 400 for a bad body or a cap, 404 for no such
object, 429 for a full queue. A route of the Tinker API this server does not implement
answers 400, naming the call.

`serve_tinker` runs the app: SIGTERM (or Ctrl-C) fails the queued calls, stops the running
one at its next step and gives open requests `shutdown_s` seconds, so the process exits
within seconds even mid-call.
"""

from __future__ import annotations

import logging
import socket
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from tempering import errors
from tempering.serve.app import RateLimiter
from tempering.serve.config import TinkerServeConfig
from tempering.serve.gate import Gate
from tempering.serve.protocol import ApiError
from tempering.serve.store import ApiKey, Store
from tempering.serve.tinker_jobs import Jobs
from tempering.serve.tinker_owners import NotFound
from tempering.serve.tinker_routes import add_routes
from tempering.serve.tinker_sched import STUCK, CallRefused, WorkerIsStuck

log = logging.getLogger(__name__)

KEY_PREFIX = "tml-"
"""What the SDK requires every API key to start with (and new keys do: `store.KEY_PREFIX`)."""


@dataclass
class TinkerServer:
    """What the gate and routes share: config, key store, rate limiter and the jobs."""

    cfg: TinkerServeConfig
    store: Store
    limiter: RateLimiter
    jobs: Jobs

    def error(self, request: Request, exc: ApiError) -> JSONResponse:
        """A refusal in the SDK's failure shape; audited under the key when there is one."""
        key = getattr(request.state, "key", None)
        self.store.audit(key.id if key else "-", request.url.path, exc.status)
        return JSONResponse({"error": exc.message, "category": "user"}, status_code=exc.status)

    def refused(self, request: Request, exc: errors.UserError) -> JSONResponse:
        """A request the jobs refused before queuing it: 404 no such object (or another key's),
        429 a full queue, 400 anything else the client sent."""
        if isinstance(exc, WorkerIsStuck):  # a status the SDK never retries (it retries every 5xx): no retry helps
            response = self.error(request, ApiError(400, str(exc)))
            response.headers["x-should-retry"] = "false"
            return response
        status = 404 if isinstance(exc, NotFound) else 429 if isinstance(exc, CallRefused) else 400
        return self.error(request, ApiError(status, str(exc)))

    def authorized(self, request: Request) -> ApiKey:
        key = getattr(request.state, "key", None)
        if key is None:
            raise ApiError(401, "missing API key (X-API-Key: tml-<key>)")
        return key

    def check_key(self, request: Request) -> ApiKey:
        """The request's live key (X-API-Key `tml-...`), put in `request.state.key`; 401 / 429."""
        secret = request.headers.get("x-api-key", "").strip()
        key = None
        if secret.startswith(KEY_PREFIX):  # the key as printed, else `tml-` + a key printed before (`tmp-...`)
            key = self.store.authenticate(secret) or self.store.authenticate(secret.removeprefix(KEY_PREFIX))
        if key is None:
            raise ApiError(
                401,
                "incorrect API key (X-API-Key: the key `temper keys create` printed)"
                if secret
                else "missing API key (X-API-Key: tml-<key>)",
            )
        request.state.key = key
        limit = key.rate_limit or self.limiter.default
        if not self.limiter.allow(key.id, limit):
            raise ApiError(429, f"rate limit reached for key {key.name}: {limit} requests per minute")
        return key

    def queue(self, request: Request, call: str, fn: Callable[[], Any], **extra: Any) -> dict:
        """Queue `fn` under the request's key; the SDK's untyped future for it (audited as accepted)."""
        key = self.authorized(request)
        request_id = self.jobs.calls.submit(key.id, call, fn)
        self.store.audit(key.id, request.url.path, 200)
        return {"request_id": request_id, **extra}


def create_tinker_app(cfg: TinkerServeConfig, store: Store | None = None) -> FastAPI:
    """The Tinker API server for `cfg`; `store` defaults to `cfg.db_path` (keys, audit)."""
    server = TinkerServer(cfg, store or Store(cfg.db_path), RateLimiter(cfg.rate_limit), Jobs(cfg))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await run_in_threadpool(server.jobs.close)

    app = FastAPI(title="tempering tinker serve", version="1", lifespan=lifespan)
    app.state.store, app.state.jobs, app.state.cfg = server.store, server.jobs, cfg
    app.add_middleware(Gate, server=server)
    app.add_exception_handler(ApiError, server.error)  # type: ignore[arg-type]
    app.add_exception_handler(errors.UserError, server.refused)  # type: ignore[arg-type]
    if server.jobs.owners.lost:
        log.warning("tinker: %s", lost_message(server.jobs))

    @app.get("/api/v1/healthz")
    async def healthz():
        if server.jobs.calls.stuck:  # a supervisor restarts a server whose worker is stuck
            return JSONResponse({"status": "stuck", "detail": STUCK}, status_code=503)
        return {"status": "ok"}

    add_routes(app, server)
    return app


def lost_message(jobs: Jobs) -> str:
    """The training clients an earlier run of the server held in memory and lost, by key."""
    lost = jobs.owners.lost.values()
    by_key = {k: [r.model_id for r in lost if r.key == k] for k in sorted({r.key for r in lost})}
    return (
        f"{len(lost)} training clients of an earlier run were lost (in memory only; their saved "
        "checkpoints remain their keys'): " + "; ".join(f"{k}: {', '.join(ids)}" for k, ids in by_key.items())
    )


def serve_tinker(app: FastAPI, sock: socket.socket | None = None) -> None:
    """Run `app` with uvicorn on `app.state.cfg`'s host and port (or on `sock`). A stop signal
    first stops the calls (queued ones fail, the running one ends at its next step), then
    uvicorn gives open requests `shutdown_s` seconds."""
    import uvicorn

    cfg, jobs = app.state.cfg, app.state.jobs

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            threading.Thread(target=jobs.calls.close, args=(0.0,), daemon=True).start()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="warning", timeout_graceful_shutdown=cfg.shutdown_s
    )
    Server(config).run(sockets=[sock] if sock is not None else None)
