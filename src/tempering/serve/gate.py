"""The server's front gate: what every HTTP request passes before a route reads its body.

    app = Gate(fastapi_app, server)              # outermost ASGI app (serve/app.py)

In order, for each HTTP request:

  1. its route template (`/v1/models/{name}`, or `unmatched` for a path no route has) goes
     into `request.state.endpoint`; metrics are labelled by it, so made-up paths add no label;
  2. a body longer than `ServeConfig.max_body_bytes` is a 413 (at once when Content-Length
     says so, else as soon as the bytes read pass the cap), never parsed;
  3. a route that takes a key checks it here (`Server.check_key`: 401, 429) before a byte of
     the body is read, so a client without a key costs a header and one indexed lookup;
  4. the body, read whole up to the cap, is handed to the route.

What it does not do: bound connections, slow clients or header sizes (uvicorn's limits and a
reverse proxy do that), or the work a valid body asks for (the server bounds prompts x n
and tokens).
"""

from __future__ import annotations

from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tempering.serve.protocol import ApiError

UNMATCHED = "unmatched"
"""The endpoint label of every path no route has."""


class Gate:
    """ASGI middleware in front of the app (see the module docstring)."""

    def __init__(self, app: ASGIApp, server: Any):
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})
        endpoint, keyed = self._route(scope)
        scope["state"]["endpoint"] = endpoint
        request = Request(scope, receive)
        try:
            declared = int(request.headers.get("content-length") or 0)
        except ValueError:
            declared = 0  # h11 / httptools refuse a malformed length before we see it
        cap = self.server.cfg.max_body_bytes
        try:
            if declared > cap:
                raise _too_large(cap)
            if keyed:
                await run_in_threadpool(self.server.check_key, request)
            body = await _read_body(receive, cap)
        except ApiError as exc:
            await self.server.error(request, exc)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _route(self, scope: Scope) -> tuple[str, bool]:
        """(route template, whether it takes a key) of the request; a method the route lacks
        still gets its template (the 405 is labelled by it)."""
        partial = None
        for route in scope["app"].router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return route.path, self._keyed(route)
            if match == Match.PARTIAL and partial is None:
                partial = route.path
        return partial or UNMATCHED, False

    def _keyed(self, route: Any) -> bool:
        return isinstance(route, APIRoute) and any(
            d.call == self.server.authorized for d in route.dependant.dependencies
        )


def _too_large(cap: int) -> ApiError:
    return ApiError(413, f"request body over {cap} bytes", "request_too_large")


async def _read_body(receive: Receive, cap: int) -> bytes:
    """The whole body, refused (413) once it passes `cap` bytes."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client left: nothing more will come
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise _too_large(cap)
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the read body over once, then passes on (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
