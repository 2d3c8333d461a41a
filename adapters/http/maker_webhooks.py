"""The makers' webhooks in (issue 28, ADR 0031): `/makers/{provider}/webhook` on the team
API ({base_url}, HEALTHLEDGER_PUBLIC_BASE_URL), where Oura, Fitbit, Withings... call us.

No team key: the maker authenticates each request its own way, which its verifier
(`MakerWebhooks`, adapters/providers/maker_webhooks.py) checks. GET and HEAD answer the
maker's subscription handshake; POST carries notifications:

- a bad or missing signature is a 401 and nothing is stored;
- a signed body we cannot read is a 400;
- otherwise each notice is recorded, once (a notice sent again changes nothing), for
  every live connection of the account it names, and the answer is 200 at once: the
  pull worker, woken by the commit, syncs the named days afterwards. A notice about an
  account we do not know is acknowledged too (the maker must not retry it) and dropped.

Nothing the maker sends is logged or echoed: the body names a person.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

WEBHOOK_PATH = "/makers/{provider}/webhook"
_UNKNOWN_MAKER = "No webhook of this provider is configured here."

router = APIRouter(tags=["makers' webhooks"], route_class=LedgerRoute)


class NoticesAccepted(BaseModel):
    """What a maker's notification brought (counts only: nothing about the person)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"recorded": 1, "duplicates": 0, "unknown": 0}]}
    )

    recorded: int = Field(description="Notices recorded now (their sync follows).")
    duplicates: int = Field(description="Notices received before: nothing changed.")
    unknown: int = Field(description="Notices about no live connection: dropped.")


@router.head(
    WEBHOOK_PATH,
    summary="A maker's probe of the callback",
    description="Withings probes a callback with HEAD before it subscribes it: answered as "
    "the maker's scheme says (404 for a provider without webhooks here).",
    operation_id="maker_webhook_probe",
    responses=error_responses(404, 422, described={404: _UNKNOWN_MAKER}),
)
@router.get(
    WEBHOOK_PATH,
    summary="A maker's subscription handshake",
    operation_id="maker_webhook_handshake",
    description="The verification request a maker sends when we subscribe (Oura: GET with "
    "`verification_token` and `challenge`; Fitbit: GET with `verify`; Withings: HEAD). "
    "Answered as the maker's scheme says; 404 for a provider without webhooks here or a "
    "request that is no handshake of its.",
    responses=error_responses(404, 422, described={404: _UNKNOWN_MAKER}),
)
def handshake(provider: str, request: Request, service: CurrentService) -> Response:
    webhooks = service.maker_webhooks.get(provider)
    if webhooks is None:
        return JSONResponse({"detail": _UNKNOWN_MAKER}, status_code=404)
    answer = webhooks.challenge(
        request.method,
        dict(request.query_params),
        {k.lower(): v for k, v in request.headers.items()},
    )
    if answer is None:
        return JSONResponse({"detail": "Not a handshake of this provider."}, status_code=404)
    body = b"" if request.method == "HEAD" else answer.body
    return Response(body, status_code=answer.status, media_type=answer.media_type)


@router.post(
    WEBHOOK_PATH,
    summary="A maker's notification",
    operation_id="maker_webhook_notification",
    description="A maker tells us a person's data changed, or that the person revoked "
    "access. Verified with the maker's own signature scheme; recorded once; answered at "
    "once (the named days are synced afterwards, and announced to the team as "
    "`daily.data.<resource>.created|updated`). Not authenticated with a team key.",
    response_model=NoticesAccepted,
    responses=error_responses(
        400,
        401,
        404,
        422,
        described={
            400: "Signed, but not a notification we can read.",
            401: "Missing or wrong signature (each maker's own scheme): nothing stored.",
            404: _UNKNOWN_MAKER,
        },
    ),
)
async def notification(provider: str, request: Request, service: CurrentService) -> Response:
    webhooks = service.maker_webhooks.get(provider)
    if webhooks is None:
        return JSONResponse({"detail": _UNKNOWN_MAKER}, status_code=404)
    body = await request.body()
    headers = {k.lower(): v for k, v in request.headers.items()}
    request_id = str(request.scope.get("state", {}).get("request_id", "maker-webhook"))

    def receive() -> Response:
        try:
            notices = webhooks.notices(headers, body, service.clock())
        except NoticeRefused as exc:
            return JSONResponse({"detail": exc.message}, status_code=401)
        except NoticeMalformed as exc:
            return JSONResponse({"detail": exc.message}, status_code=400)
        intake = service.maker_notices.receive(notices, request_id)
        return JSONResponse(
            NoticesAccepted(
                recorded=intake.recorded, duplicates=intake.duplicates, unknown=intake.unknown
            ).model_dump()
        )

    # The intake reads and writes the database: off the event loop.
    return await run_in_threadpool(receive)
