"""Manual providers (`link.connect_manual_provider` of the official clients; issue 34):
a team connects, with its key, a provider whose data the person's phone sends itself
through the mobile SDK (Apple Health, Health Connect, a Bluetooth meter) or that the team
records by hand (`manual`). Nothing is pulled from a maker, so no pulls are scheduled;
the connection is listed, announced and deregistered like every other."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations.schemas import Success
from healthledger.adapters.operations.users import known_provider
from healthledger.domain.connections.providers import offered_availability
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.free_text import FreeText
from pydantic import BaseModel, ConfigDict, Field

# The catalog's auth types of providers whose data comes from the person's device.
MANUAL_AUTH_TYPES = frozenset({"sdk", "app"})

router = APIRouter(tags=["link"], route_class=LedgerRoute)


class ManualConnect(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    provider_id: FreeText | None = Field(
        default=None,
        max_length=256,
        description="The SDK's id for the person at the provider (kept sealed).",
    )


@router.post(
    "/v2/link/provider/manual/{provider}",
    response_model=Success,
    responses=error_responses(401, 404, 409, 422, described=USER_NOT_FOUND),
)
def connect_manual(
    service: CurrentService, provider: str, body: ManualConnect, caller: TeamApiCaller
) -> Any:
    """Connect a provider whose data comes from the person's device (the catalog's `sdk`
    and `app` providers); its resources are the catalog's."""
    entry = known_provider(service, provider, "path")
    if entry.auth_type not in MANUAL_AUTH_TYPES:
        raise InvalidRequest(
            "This provider connects through the link, not manually.", "provider", "path"
        )
    try:
        availability = service.pulls.adapter_for(entry.slug, False).availability(
            entry.supported_resources
        )
    except LookupError:
        # No adapter: nothing of ours reads it, so what the catalog lists is what it sends.
        availability = offered_availability(entry.supported_resources, entry.supported_resources)
    service.connections.connect_manual(
        caller.ctx, caller.team_id, body.user_id, entry.slug, body.provider_id, availability
    )
    return {"success": True}
