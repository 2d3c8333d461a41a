"""A mobile SDK's one-time code (`link.code_create` of the official clients; issue 34;
domain/connections/link_codes.py): the team's backend creates it with its key, the app
exchanges it once, without any key, for the user's sign-in token (users.py)."""

# No `from __future__ import annotations`: a query parameter's type is read when the
# routes are built, and a string annotation is resolved then from this module's globals,
# where a test's frozen clock (freezegun) has put its FakeDatetime if the routes are first
# built inside it (FastAPI: "Invalid args for response field", a 500 on every route).
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from healthledger.adapters.composition import Service
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.sign_in_tokens import SignInTokens
from healthledger.adapters.http.users import SignInTokenAnswer
from healthledger.domain.connections.link_codes import LinkCodeRejected, LinkCodes
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

EXCHANGE_PATH = "/v2/link/code/exchange"

router = APIRouter(tags=["link"], route_class=LedgerRoute)


class LinkCodeCreated(BaseModel):
    """The official clients' VitalTokenCreatedResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "code": "hlc_5b0c2d9e8a4b7c8d5e6f708192a3b4c1_"
                    "mXc9VtLk4Hs8PwYdN1bGj6FaEo3Ui5KxRn0TyAq7Zr2",
                    "exchange_url": "https://api.example.com/v2/link/code/exchange",
                    "expires_at": "2026-03-01T13:00:00Z",
                }
            ]
        }
    )
    code: str
    exchange_url: str
    expires_at: datetime


class CodeExchange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(max_length=512)


def _codes(service: Service) -> LinkCodes:
    return LinkCodes(service.ledger, service.clock, service.users)


@router.post(
    "/v2/link/code/create",
    response_model=LinkCodeCreated,
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def create_code(
    service: CurrentService,
    caller: TeamApiCaller,
    user_id: Annotated[UUID, Query()],
    expires_at: Annotated[
        datetime | None,
        Query(description="When the code expires: within 24 hours (default: an hour)."),
    ] = None,
) -> Any:
    """A one-time code for the mobile SDK on the user's phone, which exchanges it at
    `exchange_url` for the user's sign-in token. Only its hash is stored."""
    code, plain = _codes(service).issue(
        caller.ctx, caller.team_id, caller.environment, user_id, expires_at
    )
    base = service.settings.public_base_url.rstrip("/")
    return {"code": plain, "exchange_url": f"{base}{EXCHANGE_PATH}", "expires_at": code.expires_at}


@router.post(
    EXCHANGE_PATH,
    response_model=SignInTokenAnswer,
    responses=error_responses(
        401, 422, described={401: "The code is not valid, has expired or has been used."}
    ),
)
async def exchange_code(service: CurrentService, request: Request, body: CodeExchange) -> Any:
    """The code, used up, for the user's sign-in token (no key: the code is the
    credential, once)."""
    try:
        code = await run_in_threadpool(_codes(service).redeem, body.code, request.state.request_id)
    except LinkCodeRejected as exc:
        return JSONResponse(status_code=401, content={"detail": exc.message})
    tokens = SignInTokens(service.cursor_secret)
    grant = tokens.issue(code.team_id, code.user_id, code.environment, service.clock())
    return {
        "user_id": code.user_id,
        "sign_in_token": tokens.sign(grant),
        "expires_at": grant.expires_at,
    }
