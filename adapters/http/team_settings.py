"""The team's own settings as the official clients read them (`team.*` of `vital`; issue
34): the team, its link configuration, and a search of its users. Each answers for the
caller's team only: another team's id is a 404, as everywhere.

The client's `ClientFacingTeam` holds secrets in the production API (a webhook secret, API
keys, an OAuth client secret); we answer none of them (keys are stored hashed, secrets are
sealed): those fields are absent, which the client's optional fields allow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.concurrency import run_in_threadpool
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.link_page import offered, team_signs_in
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.webhook_portal import portal_link
from healthledger.adapters.operations import users as operations
from healthledger.adapters.operations.schemas import ResolvedUser
from healthledger.adapters.persistence.queries.team_metrics import TeamMetrics
from healthledger.domain.errors import TeamNotFound, UserNotFound, UserScheduledForDeletion
from pydantic import BaseModel, ConfigDict

router = APIRouter(route_class=LedgerRoute, tags=["team"])

# Who orders and signs lab tests for a team: the lab's own physician network (the
# simulated lab of the sandbox; we keep no team physicians).
DELEGATED_FLOW = "order_and_results_with_vital_physician_network"


_TEAM_ID = "5f0c6a3e-2b1d-4c8e-9a7f-3d2e1c0b9a87"


class TeamAnswer(BaseModel):
    """The team as the client's `ClientFacingTeam` reads it, with our own fields."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": _TEAM_ID,
                    "org_id": "0b1e2d3c-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
                    "name": "Sleep study",
                    "logo_url": None,
                    "lab_tests_patient_communication_enabled": True,
                    "lab_tests_patient_sms_communication_enabled": False,
                    "lab_tests_patient_email_communication_enabled": False,
                    "testkits_texts_enabled": False,
                    "delegated_flow": DELEGATED_FLOW,
                    "region": "us",
                    "created_on": "2026-03-01T12:00:00+00:00",
                    "settings": {},
                    "features": ["portal_url"],
                }
            ]
        },
    )
    id: UUID
    org_id: UUID
    name: str
    logo_url: str | None
    # Patient communications of lab testing: the lab portal's links (the closed-beta
    # `portal_url` feature); we send no texts nor e-mails ourselves.
    lab_tests_patient_communication_enabled: bool
    lab_tests_patient_sms_communication_enabled: bool
    lab_tests_patient_email_communication_enabled: bool
    testkits_texts_enabled: bool
    delegated_flow: str


class LinkProvider(BaseModel):
    slug: str
    name: str
    logo: str | None
    auth_type: str | None
    # How the link page connects it: at the maker's sign-in, or as a simulated device.
    connects: str


class LinkConfig(BaseModel):
    """What a custom link widget needs: the brand to show and the providers to offer."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "team_id": _TEAM_ID,
                    "environment": "sandbox",
                    "brand_name": "Example Health",
                    "logo_url": "https://example.com/logo.png",
                    "brand_information": None,
                    "providers": [
                        {
                            "slug": "oura",
                            "name": "Oura",
                            "logo": None,
                            "auth_type": "oauth",
                            "connects": "demo",
                        }
                    ],
                    "user_id": None,
                    "expires_at": None,
                }
            ]
        }
    )

    team_id: UUID
    environment: str
    brand_name: str
    logo_url: str | None
    brand_information: dict[str, Any] | None
    providers: list[LinkProvider]
    # With a link token: the user it is bound to, and until when it can be used.
    user_id: UUID | None = None
    expires_at: str | None = None


@router.get(
    "/v2/team/link/config",
    response_model=LinkConfig,
    responses=error_responses(401, 404, 422),
    dependencies=[TEAM_READ_REFUSES_AS_OF],
)
async def link_config(
    service: CurrentService,
    caller: TeamApiCaller,
    x_vital_link_token: Annotated[str | None, Header(max_length=4096)] = None,
) -> Any:
    """The link configuration of the key's environment; with a link token of the team
    (`x-vital-link-token`), the providers that link offers and the user it is for. A
    token that is not the team's, or no longer usable, is a 404."""
    view = None
    if x_vital_link_token is not None:
        view = await run_in_threadpool(service.link_token_queries.genuine, x_vital_link_token)
        now = service.clock()
        if view is None or view.team_id != caller.team_id or view.problem(now) is not None:
            raise HTTPException(404, "Link token not found, used or expired.")
    team = await run_in_threadpool(service.team_queries.team, caller.team_id)
    if team is None:
        raise TeamNotFound()
    environment = caller.environment if view is None else view.environment
    settings = team["settings"].get(environment, {})
    information = settings.get("brand_information")
    oauth = await run_in_threadpool(team_signs_in, service, caller.team_id)
    providers = [
        LinkProvider(
            slug=entry.slug,
            name=entry.name,
            logo=entry.logo,
            auth_type=entry.auth_type,
            connects="oauth" if entry.slug in oauth else "demo",
        )
        for entry in offered(service, view, oauth)
    ]
    return LinkConfig(
        team_id=caller.team_id,
        environment=environment,
        brand_name=(information or {}).get("company_name") or team["name"],
        logo_url=settings.get("logo_url"),
        brand_information=information,
        providers=providers,
        user_id=None if view is None else view.user_id,
        expires_at=None if view is None else view.expires_at.isoformat(),
    )


class PortalLink(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "url": "https://link.example.com/webhooks?token=eyJzIjoid2ViaG9vay1w...",
                    "expires_at": "2026-03-01T13:00:00Z",
                }
            ]
        }
    )
    url: str
    expires_at: datetime


@router.get(
    "/v2/team/svix/url",
    response_model=PortalLink,
    responses=error_responses(401, 422),
    dependencies=[TEAM_READ_REFUSES_AS_OF],
)
def webhook_portal_url(service: CurrentService, caller: TeamApiCaller) -> Any:
    """A link to the webhook portal of the key's team and environment (its endpoints,
    their deliveries and each delivery's attempts; webhook_portal.py), valid for an hour.
    The path is the official clients' (`team.get_svix_url`): the portal is our own."""
    return portal_link(service, caller.team_id, caller.environment)


class MetricPoint(BaseModel):
    date: datetime
    value: float
    all: float


class TeamMetricsAnswer(BaseModel):
    """The client's MetricsResult, with our breakdowns besides."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "team_id": _TEAM_ID,
                    "number_of_users": 120,
                    "number_of_connected_sources": 95,
                    "number_of_errored_connected_sources": 3,
                    "number_of_connected_sources_by_week": [
                        {"date": "2026-02-23T00:00:00Z", "value": 4, "all": 90},
                        {"date": "2026-03-02T00:00:00Z", "value": 8, "all": 98},
                    ],
                    "number_of_ordered_tests": 14,
                    "connections_by_status": {"connected": 95, "error": 3},
                    "connections_by_provider": {"oura": 60, "whoop": 38},
                    "pulls_by_status": {"success": 180, "retrying": 2},
                    "webhook_deliveries_by_status": {"succeeded": 5012, "pending": 4},
                }
            ]
        }
    )
    team_id: UUID
    number_of_users: int
    number_of_connected_sources: int
    number_of_errored_connected_sources: int
    number_of_connected_sources_by_week: list[MetricPoint]
    number_of_ordered_tests: int
    connections_by_status: dict[str, int]
    connections_by_provider: dict[str, int]
    pulls_by_status: dict[str, int]
    webhook_deliveries_by_status: dict[str, int]


@router.get(
    "/v2/user/metrics",
    response_model=TeamMetricsAnswer,
    responses=error_responses(401, 422),
    dependencies=[TEAM_READ_REFUSES_AS_OF],
)
def team_metrics(service: CurrentService, caller: TeamApiCaller) -> Any:
    """The team's metrics: its live users; their connections (connected, in error, by
    state, by provider, and made per week over the last 12 weeks, Mondays UTC, `all` the
    total by the week's end); their pulls by state; the lab orders placed; the webhook
    deliveries by state. Counts only. The client's `user.get_team_metrics`."""
    metrics = TeamMetrics(service.db, service.pull_queries.provider_digest)
    return metrics.of(caller.team_id, service.clock(), service.catalog)


@router.get(
    "/v2/team/users/search",
    response_model=list[ResolvedUser],
    responses=error_responses(401, 422),
)
def search_users(
    service: CurrentService,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    query_id: Annotated[str | None, Query(min_length=1, max_length=255)] = None,
) -> Any:
    """The team's live users whose user_id, or else client_user_id, is `query_id`
    exactly: none or one. No `query_id`: none (this is a lookup, not a listing: GET
    /v2/user lists). With `as_of`: as the lookup answered then."""
    if query_id is None:
        return []
    try:
        user_id: UUID | None = UUID(query_id)
    except ValueError:
        user_id = None
    try:
        if user_id is not None:
            return [operations.resolved_user(service, caller.team_id, user_id, as_of=as_of)]
        if as_of is not None:
            return [reads_as_of(service, as_of).resolve(caller.team_id, query_id)]
        return [operations.resolved_by_client_user_id(service, caller.team_id, query_id)]
    except (UserNotFound, UserScheduledForDeletion):
        return []


@router.get(
    "/v2/team/{team_id}",
    response_model=TeamAnswer,
    responses=error_responses(401, 404, 422),
)
def get_team(service: CurrentService, caller: TeamApiCaller, team_id: UUID, as_of: TeamAsOf) -> Any:
    """The caller's team (another team's id: 404); with `as_of`, as it was then."""
    team = service.team_queries.team(team_id) if team_id == caller.team_id else None
    if team is None:
        raise TeamNotFound()
    if as_of is not None:
        team = reads_as_of(service, as_of).team(team["org_id"], team_id)
    settings = team["settings"].get(caller.environment, {})
    portal = "portal_url" in team["features"]
    return {
        **team,
        "logo_url": settings.get("logo_url"),
        "lab_tests_patient_communication_enabled": portal,
        "lab_tests_patient_sms_communication_enabled": False,
        "lab_tests_patient_email_communication_enabled": False,
        "testkits_texts_enabled": False,
        "delegated_flow": DELEGATED_FLOW,
    }


class Physician(BaseModel):
    """The client's ClientFacingPhysician."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"first_name": "Ada", "last_name": "Lane", "npi": "1234567893"}]
        }
    )
    first_name: str
    last_name: str
    npi: str


@router.get(
    "/v2/team/{team_id}/physicians",
    response_model=list[Physician],
    responses=error_responses(401, 404, 422),
    dependencies=[TEAM_READ_REFUSES_AS_OF],
)
def get_physicians(service: CurrentService, caller: TeamApiCaller, team_id: UUID) -> Any:
    """The physicians of the caller's team (another team's id: 404): none. A team's lab
    orders are ordered and signed by the lab's own physician network (`delegated_flow`);
    no order names a physician of the team, and no team registers one, so the list is
    empty rather than invented (docs/labs.md)."""
    if team_id != caller.team_id or service.team_queries.team(team_id) is None:
        raise TeamNotFound()
    return []
