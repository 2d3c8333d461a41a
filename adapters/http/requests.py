"""Request ids, bodies, and the last line of defence.

The id is taken from `x-request-id` when it is a sane token, else made; it is echoed on
every response and recorded on every event the request causes. An unexpected exception
becomes a JSON 500 that carries the id, and is logged by type only: exception messages
can hold values a caller sent, and nothing personal may reach a log.

Every route of both APIs is a `LedgerRoute`, whose JSON bodies are decoded so that any
malformed body is the same 422 (see `JsonBodyRequest`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any
from uuid import uuid4

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("healthledger.http")

REQUEST_ID_HEADER = "x-request-id"
_SANE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                given = value.decode("latin-1")
                break
        request_id = given if given and _SANE.match(given) else f"req-{uuid4()}"
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers
            await send(message)

        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_id(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            route = scope.get("route")
            log.error(
                "unexpected %s on %s %s (request %s)",
                type(exc).__name__,
                scope.get("method"),
                getattr(route, "path", "?"),
                request_id,
            )
            if started:
                return  # the response is under way; the client sees a cut-off body
            body = json.dumps({"detail": "Internal error.", "request_id": request_id}).encode()
            await send_with_id(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_with_id({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Refuse request bodies over `max_bytes` with a JSON 413, before any handler reads
    them: by Content-Length when given, else while the body streams in. A path that
    matches `unlimited` (an upload of a file, which streams it to disk under a limit of
    its own) is left to its route."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, unlimited: re.Pattern[str] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.unlimited = unlimited

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            self.unlimited is not None and self.unlimited.match(scope.get("path", ""))
        ):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await _too_large(send, self.max_bytes)
                return
        if any(name == b"content-length" for name, _ in scope.get("headers", ())):
            await self.app(scope, receive, send)
            return
        # No length given (a chunked body): read it here, up to the limit, and hand the
        # application the whole of it; the framework would turn an error raised while
        # it reads the body into a 400 of its own.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                await _too_large(send, self.max_bytes)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, max_bytes: int) -> None:
    body = json.dumps({"detail": f"Request body larger than {max_bytes} bytes."}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


_SUCCESSOR_LINK = b'</docs#/management>; rel="deprecation"; title="Use X-Management-Key"'


class DeprecatedHeaderMiddleware:
    """Answer requests that authenticate with the legacy X-Service-Org-Key header with
    `Deprecation` and `Link` headers that name its successor, X-Management-Key."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        names = {name for name, _ in scope.get("headers", ())} if scope["type"] == "http" else ()
        if b"x-service-org-key" not in names or b"x-management-key" in names:
            await self.app(scope, receive, send)
            return

        async def send_with_deprecation(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"deprecation", b"true"),
                    (b"link", _SUCCESSOR_LINK),
                ]
            await send(message)

        await self.app(scope, receive, send_with_deprecation)


class JsonBodyRequest(Request):
    """A request whose body, however it is malformed, fails as a JSON decode error.

    FastAPI answers a JSON decode error with a 422 in the pydantic shape, but any other
    failure of the parser with a 400 of its own: JSON nested deeper than the parser's
    recursion limit, an integer longer than Python converts (4300 digits), bytes that are
    not UTF-8. Here those are decode errors too, so one status answers every malformed
    body."""

    async def json(self) -> Any:
        body = await self.body()
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            raise
        except RecursionError:
            reason = "JSON nested too deeply"
        except ValueError:  # UnicodeDecodeError is one, as is the integer digit limit
            reason = "not JSON this service can read (encoding or number size)"
        raise json.JSONDecodeError(reason, body.decode("utf-8", "replace"), 0) from None


class LedgerRoute(APIRoute):
    """The route class of every router of both APIs: hands its handler a
    `JsonBodyRequest` (FastAPI's documented way to change how a request is read)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(JsonBodyRequest(request.scope, request.receive))

        return handle
