"""Management API routes for webhook endpoints, per team and environment (gaps.md,
Webhooks and Management API), under `/v1/org/{org_id}/team/{team_id}/{env}/webhook`.

Who may call them is as for every team-scoped management route: an org key, or a team key
bound to the team; another team or organization is a 404. The signing secret is returned
only by the two secret routes, never in an endpoint's view.
"""

from datetime import datetime
from typing import Annotated, Any, Self
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import MANAGEMENT_READ_REFUSES_AS_OF, ManagementAsOf
from healthledger.adapters.http.auth import ManagementApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.management import Environment, reachable_team
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.errors import NothingToUpdate, WebhookEndpointNotFound
from healthledger.domain.free_text import FreeText, MultilineText
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

URL_MAX = 2048
DESCRIPTION_MAX = 500
FILTER_TYPES_MAX = 250  # more than the catalog has exact types

FilterEntry = Annotated[FreeText, Field(min_length=1, max_length=128)]


class WebhookEndpointCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: FreeText = Field(min_length=1, max_length=URL_MAX)
    description: MultilineText = Field(default="", max_length=DESCRIPTION_MAX)
    disabled: bool = False
    # Exact event types or prefixes (`daily.data.*`); none (null or []) means every type.
    filter_types: list[FilterEntry] | None = Field(default=None, max_length=FILTER_TYPES_MAX)


class WebhookEndpointPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: FreeText | None = Field(default=None, min_length=1, max_length=URL_MAX)
    description: MultilineText | None = Field(default=None, max_length=DESCRIPTION_MAX)
    disabled: bool | None = None
    filter_types: list[FilterEntry] | None = Field(default=None, max_length=FILTER_TYPES_MAX)

    @model_validator(mode="after")
    def _no_null_but_filters(self) -> Self:
        # A null filter_types means "every type"; a null anything else means nothing.
        for name in ("url", "description", "disabled"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null; leave it out to keep it")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Events recorded at or after this instant (with a time zone).
    since: AwareDatetime


class ReplayAnswer(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"replayed": 12}]})

    replayed: int


# Examples for the OpenAPI document only; they change no response.
_ENDPOINT_EXAMPLE: JsonDict = {
    "id": "9d4e2f1a-6b3c-4d7e-8f90-1a2b3c4d5e6f",
    "team_id": "6c38d542-7c4b-444c-b12e-d3b00903bbef",
    "environment": "sandbox",
    "url": "https://hooks.example.com/healthledger",
    "description": "Sleep study ingestion",
    "filter_types": ["daily.data.*", "provider.connection.created"],
    "disabled": False,
    "disabled_reason": None,
    "created_on": "2026-03-01T12:00:00Z",
    "updated_at": "2026-03-01T12:00:00Z",
}


class WebhookEndpointView(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_ENDPOINT_EXAMPLE]})

    id: UUID
    team_id: UUID
    environment: str
    url: str
    description: str
    filter_types: list[str]
    disabled: bool
    # management_request, endpoint_gone (410) or failing_for_5_days; null when enabled.
    disabled_reason: str | None
    created_on: datetime
    updated_at: datetime


class WebhookEndpointList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"webhook_endpoints": [_ENDPOINT_EXAMPLE]}]}
    )

    webhook_endpoints: list[WebhookEndpointView]


class SigningSecret(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    # A made-up secret.
                    "secret": "whsec_ZXhhbXBsZS1zaWduaW5nLWtleS1ub3QtcmVhbC0zMmI=",
                    "previous_secret_expires_at": "2026-03-02T12:00:00Z",
                }
            ]
        }
    )

    # `whsec_` + base64: the key of the Standard Webhooks signature.
    secret: str
    # After a rotation, the previous secret still signs (beside this one) until then.
    previous_secret_expires_at: datetime | None


def _view(service: Service, endpoint_id: UUID) -> dict[str, Any]:
    found = service.webhook_queries.endpoint(endpoint_id)
    if found is None:
        raise WebhookEndpointNotFound()
    return found


router = APIRouter(
    prefix="/v1/org/{org_id}/team/{team_id}/{env}/webhook",
    tags=["webhooks"],
    route_class=LedgerRoute,
)
# Every operation: 401 (key), 404 (team, endpoint) and 422 (parameters, body);
# changes also 409 (a concurrent change), and a patch 400 when it is empty.
READS = error_responses(401, 404, 422)
CHANGES = error_responses(401, 404, 409, 422)
PATCHES = error_responses(400, 401, 404, 409, 422)


@router.post("", response_model=WebhookEndpointView, responses=CHANGES)
def create_endpoint(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    body: WebhookEndpointCreate,
    caller: ManagementApiCaller,
) -> Any:
    """A new endpoint with a fresh signing secret (read it from `.../secret`)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    endpoint = service.webhooks.create(
        caller.ctx,
        team_id,
        env,
        url=body.url,
        description=body.description,
        filter_types=body.filter_types,
        disabled=body.disabled,
        org_id=org_id,
    )
    return _view(service, endpoint.id)


@router.get("", response_model=WebhookEndpointList, responses=READS)
def list_endpoints(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team's endpoints of the environment (with `as_of`: those it had then, as they
    were, from the log; the team must be reachable now)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    if as_of is not None:
        endpoints = reads_as_of(service, as_of).webhook_endpoints(team_id, env)
        return {"webhook_endpoints": endpoints}
    return {"webhook_endpoints": service.webhook_queries.endpoints(team_id, env)}


@router.get("/{endpoint_id}", response_model=WebhookEndpointView, responses=READS)
def get_endpoint(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """One endpoint (with `as_of`: as it was then; not created yet or deleted by then:
    a 404)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    if as_of is not None:
        return reads_as_of(service, as_of).webhook_endpoint(team_id, env, endpoint_id)
    service.webhooks.endpoint(team_id, env, endpoint_id, org_id)
    return _view(service, endpoint_id)


@router.patch("/{endpoint_id}", response_model=WebhookEndpointView, responses=PATCHES)
def patch_endpoint(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    body: WebhookEndpointPatch,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    if not body.model_fields_set:
        raise NothingToUpdate()
    service.webhooks.update(caller.ctx, team_id, env, endpoint_id, body.changes(), org_id)
    return _view(service, endpoint_id)


@router.delete("/{endpoint_id}", responses=CHANGES)
def delete_endpoint(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.webhooks.delete(caller.ctx, team_id, env, endpoint_id, org_id)
    return {"success": True}


@router.get(
    "/{endpoint_id}/secret",
    dependencies=[MANAGEMENT_READ_REFUSES_AS_OF],
    response_model=SigningSecret,
    responses=READS,
)
def get_secret(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    """The current signing secret (a credential: keep it like one). It does not travel
    in time: an answer about the past would hand out a secret rotated away since, which
    is no longer in force and must not be shown again."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    secrets = service.webhooks.secrets(team_id, env, endpoint_id, org_id)
    return {
        "secret": secrets.current,
        "previous_secret_expires_at": secrets.previous_expires_at,
    }


@router.post("/{endpoint_id}/secret/rotate", response_model=SigningSecret, responses=CHANGES)
def rotate_secret(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    """A new secret; the previous one keeps signing beside it for 24 hours."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    secrets = service.webhooks.rotate_secret(caller.ctx, team_id, env, endpoint_id, org_id)
    return {
        "secret": secrets.current,
        "previous_secret_expires_at": secrets.previous_expires_at,
    }


@router.post("/{endpoint_id}/replay", response_model=ReplayAnswer, responses=READS)
def replay(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    endpoint_id: UUID,
    body: ReplayRequest,
    caller: ManagementApiCaller,
) -> Any:
    """Send the endpoint everything announced to it since `since` again, with the
    original message ids (receivers deduplicate by them)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.webhooks.endpoint(team_id, env, endpoint_id, org_id)
    return {"replayed": service.redeliveries.replay(caller.ctx, endpoint_id, body.since)}
