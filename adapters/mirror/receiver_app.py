"""The receiver as a small ASGI app (Starlette), for embedders that want an endpoint as is.

One route, `POST {path}`: the raw body and headers go to `WebhookReceiver.receive` (in a
worker thread: it writes to the database). Answers, all JSON:

- 200 `{"outcome": "applied" | "duplicate" | "received", "message_id"}`: taken, or taken
  before (the sender must stop retrying a duplicate, so it is a success);
- 400 `{"detail": {"error_type", "error_message"}}`: missing or malformed signature
  headers, a body that is not JSON or not a message of the contract;
- 401, same shape: a signature that matches no secret, or a timestamp outside the tolerance;
- 409: other messages about the same user kept winning (the sender retries);
- 413: a body over `max_body_bytes`.

Error bodies name the problem, never a value from the payload or the headers.
"""

from __future__ import annotations

import logging
from typing import Any

from healthledger.adapters.mirror.messages import InvalidMessage
from healthledger.adapters.mirror.receiver import WebhookReceiver
from healthledger.adapters.webhooks.signing import (
    MALFORMED_HEADERS,
    MISSING_HEADERS,
    VerificationError,
)
from healthledger.domain.mirror.mirroring import MirrorBusy
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

logger = logging.getLogger("healthledger.receiver")

# Our messages are a day of one resource at most; a day of one-second samples is a few MB.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


def create_receiver_app(
    receiver: WebhookReceiver,
    *,
    path: str = "/webhooks",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Starlette:
    async def receive(request: Request) -> JSONResponse:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            return _error(413, "body_too_large", "The body is too large.")
        body = await request.body()
        if len(body) > max_body_bytes:
            return _error(413, "body_too_large", "The body is too large.")
        try:
            receipt = await run_in_threadpool(receiver.receive, body, request.headers)
        except VerificationError as exc:
            status = 400 if exc.reason in (MISSING_HEADERS, MALFORMED_HEADERS) else 401
            return _error(status, exc.reason, exc.message)
        except InvalidMessage as exc:
            return _error(400, exc.reason, exc.message)
        except MirrorBusy as exc:
            return _error(409, "mirror_busy", exc.message)
        except Exception as exc:
            # The type only: an exception's text may quote the payload.
            logger.error("webhook receiver failed: %s", type(exc).__name__)
            return JSONResponse({"detail": "Internal error."}, status_code=500)
        return JSONResponse({"outcome": receipt.outcome, "message_id": receipt.message_id})

    return Starlette(routes=[Route(path, receive, methods=["POST"])])


def _error(status: int, error_type: str, message: str) -> JSONResponse:
    detail: dict[str, Any] = {"error_type": error_type, "error_message": message}
    return JSONResponse({"detail": detail}, status_code=status)
