"""Team API routes for link tokens (spec 2.5, endpoint 6, section 5 rules 7 and 9;
gaps.md Provider connections, link)."""

from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.connections.link_tokens import INVALID_TOKEN
from healthledger.domain.free_text import FreeText, WebUrl
from pydantic import BaseModel, ConfigDict, Field

# More slugs than the catalog holds is a mistake, not an allowlist: bounded to keep the
# work per request small.
_MAX_FILTER = 100
_Slug = Annotated[FreeText, Field(max_length=64)]


class LinkTokenRequest(BaseModel):
    """Spec 2.5. The slugs are checked against the provider catalog after this shape."""

    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    provider: _Slug | None = Field(
        default=None,
        description="When set, the link page goes straight to this provider.",
    )
    redirect_url: WebUrl | None = Field(
        default=None,
        description="Where the link page sends the user when it is done, with "
        "`?state=success` or `?state=error&error_type=...&error=...`.",
    )
    filter_on_providers: list[_Slug] | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_FILTER,
        description="The providers the link page shows (all demo-capable ones when null).",
    )
    on_error: Literal["redirect"] | None = Field(
        default=None,
        description="`redirect`: password and e-mail providers' errors redirect to "
        "redirect_url instead of showing on the page (needs redirect_url).",
    )
    on_close: Literal["redirect"] | None = Field(
        default=None,
        description="`redirect`: the close button redirects to redirect_url with "
        "error_type user_cancelled (needs redirect_url).",
    )


# Examples for the OpenAPI document only; they change no response. A made-up token.
_LINK_TOKEN_EXAMPLE = (
    "hll_3f6b1c2d9e8a4b7c8d5e6f708192a3b4_q7Zr2mXc9VtLk4Hs8PwYdN1bGj6FaEo3Ui5KxRn0TyA"
)


class LinkTokenResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "link_token": _LINK_TOKEN_EXAMPLE,
                    "link_web_url": f"https://link.example.com/?token={_LINK_TOKEN_EXAMPLE}"
                    "&env=sandbox&region=us",
                }
            ]
        }
    )
    link_token: str
    link_web_url: str


class LinkTokenCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Longer than any token: still answered (invalid) rather than refused, up to a bound.
    token: str = Field(max_length=512)


class LinkTokenValidity(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"is_valid": True, "reason": None, "expires_at": "2026-03-01T13:00:00Z"},
                {"is_valid": False, "reason": "invalid_token", "expires_at": None},
            ]
        }
    )
    is_valid: bool
    reason: Literal["invalid_token", "token_expired", "token_consumed"] | None = Field(
        description="Why the token cannot be used; null when it can."
    )
    expires_at: datetime | None = Field(
        description="When a genuine token expires (null for an invalid token)."
    )


def link_web_url(link_url: str, token: str, environment: str, region: str) -> str:
    """gaps.md: `{link_url}/?token=<url-encoded>&env=<environment>&region=<us|eu>`."""
    query = urlencode({"token": token, "env": environment, "region": region})
    return f"{link_url.rstrip('/')}/?{query}"


router = APIRouter(tags=["link"], route_class=LedgerRoute)


@router.post(
    "/v2/link/token",
    response_model=LinkTokenResponse,
    responses=error_responses(
        401,
        404,
        422,
        described={**USER_NOT_FOUND, 422: "Invalid body or unknown provider slug."},
    ),
)
def create_link_token(
    service: CurrentService, body: LinkTokenRequest, caller: TeamApiCaller
) -> Any:
    """A link token for one live user of the team: it lives 60 minutes and is
    consumed by the first successful connection. `link_web_url` opens the hosted
    link page with it (environment of the calling key, region of the team)."""
    issued = service.link_tokens.issue(
        caller.ctx,
        caller.team_id,
        caller.environment,
        user_id=body.user_id,
        provider=body.provider,
        redirect_url=None if body.redirect_url is None else str(body.redirect_url),
        filter_on_providers=body.filter_on_providers,
        on_error=body.on_error,
        on_close=body.on_close,
    )
    return {
        "link_token": issued.plain,
        "link_web_url": link_web_url(
            service.settings.link_url, issued.plain, caller.environment, caller.region
        ),
    }


@router.post(
    "/v2/link/token/isValid", response_model=LinkTokenValidity, responses=error_responses(422)
)
def check_link_token(service: CurrentService, body: LinkTokenCheck) -> Any:
    """Whether a link token can still be used; it is not consumed by asking.

    No team API key is needed: the token is itself the credential (256 random bits,
    bound to one user), and a team's own link widget runs in the user's browser,
    where the team key must never be. So the answer carries nothing personal and
    nothing about the team or the user: only the validity, the reason
    (invalid_token, token_expired, token_consumed) and the expiry instant. A token
    whose user was deleted since, or whose team was, is invalid_token.
    """
    view = service.link_token_queries.genuine(body.token)
    reason = INVALID_TOKEN if view is None else view.problem(service.clock())
    if view is None or reason == INVALID_TOKEN:
        return {"is_valid": False, "reason": INVALID_TOKEN, "expires_at": None}
    return {"is_valid": reason is None, "reason": reason, "expires_at": view.expires_at}
