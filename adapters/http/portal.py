"""Team API route of the portal URL (spec 2.4, endpoint 4; gaps.md Portal URL, closed
beta): `POST /v2/user/{user_id}/create_portal_url {context, order_id?}` -> `{url,
expires_in}`.

The URL opens the hosted portal page (`portal_page.py`, on the link page's app at
{link_url}) with a signed token (`portal_tokens.py`); with `order_id`, straight on that
order. Nothing is recorded: the token is the whole of the grant (docs/labs.md#portal).
"""

from typing import Any
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.portal_page import PORTAL_URL_FEATURE, portal_url
from healthledger.adapters.http.portal_tokens import PortalTokens
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations.users import require_feature
from healthledger.domain.labs.portal import PortalContext
from pydantic import BaseModel, ConfigDict, Field


class PortalUrlRequest(BaseModel):
    """Spec 2.4."""

    model_config = ConfigDict(extra="forbid")
    context: PortalContext = Field(
        description="`launch`: a short-lived URL for sending the user from the team's "
        "signed-in web app into the portal; `communications`: a long-lived one for e-mail, "
        "SMS and other messages."
    )
    order_id: UUID | None = Field(
        default=None, description="When set, the URL opens the portal on this order of the user."
    )


# An example for the OpenAPI document only: a made-up token.
_TOKEN_EXAMPLE = (
    "eyJzIjoicG9ydGFsLXYxIiwicCI6eyJ0IjoiM2Y2YjFjMmQ5ZThhNGI3YzhkNWU2ZjcwODE5MmEzYjQifX0"
    ".q7Zr2mXc9VtLk4Hs8PwYdN1bGj6F"
)


class PortalUrl(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "url": "https://link.example.com/portal/orders/"
                    f"9b2f4c1e-7d3a-4e5b-8c6d-0a1b2c3d4e5f?token={_TOKEN_EXAMPLE}",
                    "expires_in": 600,
                }
            ]
        }
    )
    url: str = Field(description="The hosted portal page, with the signed token in its query.")
    expires_in: int = Field(description="Seconds until the URL stops working.")


router = APIRouter(tags=["lab orders"], route_class=LedgerRoute)


@router.post(
    "/v2/user/{user_id:uuid}/create_portal_url",
    response_model=PortalUrl,
    responses=error_responses(
        401,
        403,
        404,
        422,
        described={
            403: "The team has not enabled the closed-beta feature `portal_url`.",
            404: "Unknown user, another team's user, or scheduled for deletion; an "
            "order_id that is not one of this user's orders.",
            422: "Invalid body, or the user has no demographics (spec 4, rule 1).",
        },
    ),
)
def create_portal_url(
    service: CurrentService, user_id: UUID, body: PortalUrlRequest, caller: TeamApiCaller
) -> Any:
    """Closed beta. A URL of the hosted portal, where the user sees their lab test
    orders, statuses and results; it stops working when it expires (`expires_in`
    seconds: launch 10 minutes, communications 28 days, both settings) or when the
    user is deleted."""
    require_feature(service, caller.team_id, PORTAL_URL_FEATURE)
    grant = service.portal.issue(caller.team_id, user_id, body.context, body.order_id)
    url = portal_url(
        service.settings.link_url,
        PortalTokens(service.cursor_secret).sign(grant),
        body.order_id,
    )
    return {"url": url, "expires_in": grant.expires_in}
