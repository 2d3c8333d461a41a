"""Management API routes for event destinations (issue 35: a team's event stream into its
own RabbitMQ or NATS JetStream), under `/v1/org/{org_id}/team/{team_id}/{env}/event_destination`.

Who may call them is as for every team-scoped management route. The connection's secret
is write-only: sent on create or PATCH (a new one rotates it at once), never answered;
a view says only whether one is set (`has_secret`).
"""

import json
import time
from datetime import datetime
from typing import Annotated, Any, Literal, Self
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.brokers.clients import Message, PublishFailed, checked_address
from healthledger.adapters.brokers.publisher import connect
from healthledger.adapters.compliance.time_travel import (
    aggregate_as_of,
    aggregates_as_of,
    reads_as_of,
    streams_founded,
)
from healthledger.adapters.http.as_of import ManagementAsOf
from healthledger.adapters.http.auth import ManagementApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.management import Environment, reachable_team
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.errors import EventDestinationNotFound, InvalidRequest, NothingToUpdate
from healthledger.domain.free_text import FreeText, MultilineText
from healthledger.domain.webhooks.event_destination_management import (
    SECRET_MAX,
    is_destination_of,
)
from healthledger.domain.webhooks.event_destinations import (
    MAX_ROUTES,
    EventDestination,
    Route,
    route_for,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator
from pydantic.config import JsonDict

DESCRIPTION_MAX = 500
TEST_EVENT_TYPE = "event_destination.test"

Name = Annotated[FreeText, Field(min_length=1, max_length=255)]


class Connection(BaseModel):
    """A broker's address and options (no secret: that is `secret`, write-only)."""

    model_config = ConfigDict(extra="forbid")
    host: Name
    port: StrictInt | None = Field(default=None, ge=1, le=65535)
    tls: StrictBool = False
    username: Annotated[FreeText, Field(min_length=1, max_length=128)] | None = None
    # RabbitMQ: the exchange messages are published to, and its virtual host.
    exchange: Name | None = None
    virtual_host: Name | None = None
    # NATS: the JetStream stream the subjects must belong to (optional).
    stream: Name | None = None

    def settings(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=False)


class RouteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # An event-type prefix (`daily.data.`, `labtest.`); "" matches every type.
    prefix: Annotated[FreeText, Field(max_length=128)]
    # A routing key on the exchange (RabbitMQ) or a subject (NATS).
    target: Name


Secret = Annotated[str, Field(min_length=1, max_length=SECRET_MAX)]


class DestinationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["rabbitmq", "nats"]
    description: MultilineText = Field(default="", max_length=DESCRIPTION_MAX)
    connection: Connection
    # The password (RabbitMQ, NATS with a username) or token (NATS without one).
    secret: Secret | None = None
    routes: list[RouteIn] = Field(min_length=1, max_length=MAX_ROUTES)
    paused: StrictBool = False


class DestinationPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: MultilineText | None = Field(default=None, max_length=DESCRIPTION_MAX)
    connection: Connection | None = None
    # A new secret rotates it at once; null removes it.
    secret: Secret | None = None
    routes: list[RouteIn] | None = Field(default=None, min_length=1, max_length=MAX_ROUTES)
    paused: StrictBool | None = None

    @model_validator(mode="after")
    def _no_null_but_secret(self) -> Self:
        for name in ("description", "connection", "routes", "paused"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null; leave it out to keep it")
        return self

    def changes(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if name == "connection":
                value = value.settings()
            elif name == "routes":
                value = [Route(r.prefix, r.target) for r in value]
            found[name] = value
        return found


class TestSend(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Routed as this event type would be (default: the first route's target).
    event_type: Annotated[FreeText, Field(min_length=1, max_length=128)] | None = None


class TestSendAnswer(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "success": True,
                    "target": "health.daily",
                    "message_id": "msg_test_1780000000000",
                    "latency_ms": 3.2,
                    "error": None,
                }
            ]
        }
    )

    success: bool
    target: str
    message_id: str
    latency_ms: float
    # Why it failed (connection_error, unroutable, no_stream, address_refused: ...).
    error: str | None


_EXAMPLE: JsonDict = {
    "id": "3f1e2d4c-5b6a-4789-8abc-def012345678",
    "team_id": "6c38d542-7c4b-444c-b12e-d3b00903bbef",
    "environment": "production",
    "kind": "rabbitmq",
    "description": "Warehouse feed",
    "connection": {
        "host": "mq.example.com",
        "port": 5671,
        "tls": True,
        "username": "healthledger",
        "exchange": "health-events",
        "virtual_host": "/",
    },
    "has_secret": True,
    "routes": [
        {"prefix": "daily.data.", "target": "health.daily"},
        {"prefix": "daily.data.sleep", "target": "health.sleep"},
        {"prefix": "labtest.", "target": "health.labs"},
    ],
    "paused": False,
    "paused_reason": None,
    "created_on": "2026-03-01T12:00:00Z",
    "updated_at": "2026-03-01T12:00:00Z",
}


class RouteView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"prefix": "daily.data.", "target": "health.daily"}]}
    )

    prefix: str
    target: str


class DestinationView(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE]})

    id: UUID
    team_id: UUID
    environment: str
    kind: str
    description: str
    connection: dict[str, Any]
    has_secret: bool
    routes: list[RouteView]
    paused: bool
    # management_request, or failing_for_5_days (the publisher); null when publishing.
    paused_reason: str | None
    created_on: datetime
    updated_at: datetime


class DestinationList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"event_destinations": [_EXAMPLE]}]})

    event_destinations: list[DestinationView]


router = APIRouter(
    prefix="/v1/org/{org_id}/team/{team_id}/{env}/event_destination",
    tags=["event destinations"],
    route_class=LedgerRoute,
)
READS = error_responses(401, 404, 422)
CHANGES = error_responses(401, 404, 409, 422)
PATCHES = error_responses(400, 401, 404, 409, 422)


@router.post("", response_model=DestinationView, responses=CHANGES)
def create_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    body: DestinationCreate,
    caller: ManagementApiCaller,
) -> Any:
    """A new destination: events whose type matches a route are published to it."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    destination = service.event_destinations.create(
        caller.ctx,
        team_id,
        env,
        kind=body.kind,
        connection=body.connection.settings(),
        routes=[Route(r.prefix, r.target) for r in body.routes],
        secret=body.secret,
        description=body.description,
        paused=body.paused,
        org_id=org_id,
    )
    return destination.view()


@router.get("", response_model=DestinationList, responses=READS)
def list_destinations(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """The team's destinations of the environment (with `as_of`: those it had then, as
    they were, from the log)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    if as_of is not None:
        reads_as_of(service, as_of)  # refuses an instant in the future
        ids = streams_founded(service, EventDestination.Created, as_of)
        candidates = list(aggregates_as_of(service, ids, as_of))
    else:
        ids = service.event_destination_queries.ids(team_id, env)
        candidates = list(service.ledger.find_many(ids).values())
    found = [
        a
        for a in candidates
        if isinstance(a, EventDestination) and is_destination_of(a, team_id, env)
    ]
    found.sort(key=lambda a: (a.created_on, a.id))
    return {"event_destinations": [a.view() for a in found]}


@router.get("/{destination_id}", response_model=DestinationView, responses=READS)
def get_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    caller: ManagementApiCaller,
    as_of: ManagementAsOf,
) -> Any:
    """One destination (with `as_of`: as it was then; not created yet or deleted by then:
    a 404)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    if as_of is not None:
        reads_as_of(service, as_of)
        found = aggregate_as_of(service, destination_id, as_of)
        if not isinstance(found, EventDestination) or not is_destination_of(found, team_id, env):
            raise EventDestinationNotFound()
        return found.view()
    return service.event_destinations.destination(team_id, env, destination_id, org_id).view()


@router.patch("/{destination_id}", response_model=DestinationView, responses=PATCHES)
def patch_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    body: DestinationPatch,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    if not body.model_fields_set:
        raise NothingToUpdate()
    return service.event_destinations.update(
        caller.ctx, team_id, env, destination_id, body.changes(), org_id
    ).view()


@router.post("/{destination_id}/pause", response_model=DestinationView, responses=CHANGES)
def pause_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    """Stop publishing; messages are kept, in order, until it is resumed."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    return service.event_destinations.set_paused(
        caller.ctx, team_id, env, destination_id, True, org_id
    ).view()


@router.post("/{destination_id}/resume", response_model=DestinationView, responses=CHANGES)
def resume_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    """Publish again (also a destination the publisher disabled after failing)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    destination = service.event_destinations.set_paused(
        caller.ctx, team_id, env, destination_id, False, org_id
    )
    return destination.view()


@router.delete("/{destination_id}", responses=CHANGES)
def delete_destination(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    caller: ManagementApiCaller,
) -> Any:
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.event_destinations.delete(caller.ctx, team_id, env, destination_id, org_id)
    return {"success": True}


@router.post("/{destination_id}/test", response_model=TestSendAnswer, responses=READS)
def test_send(
    service: CurrentService,
    org_id: UUID,
    team_id: UUID,
    env: Environment,
    destination_id: UUID,
    caller: ManagementApiCaller,
    body: TestSend | None = None,
) -> Any:
    """Publish one `event_destination.test` message now, with the destination's settings,
    and answer how it went (the broker's acknowledgement, or why not). Nothing about it
    is recorded in the log. The body is optional (`{}` or none: the first route)."""
    reachable_team(service.team_queries, caller, org_id, team_id)
    service.event_destinations.destination(team_id, env, destination_id, org_id)
    target = service.event_destinations.target(destination_id)
    if target is None:
        raise EventDestinationNotFound()
    event_type = None if body is None else body.event_type
    routed = route_for(target.routes, event_type) if event_type else target.routes[0].target
    if routed is None:
        raise InvalidRequest("no route of the destination matches event_type.", "event_type")
    message_id = f"msg_test_{int(time.time() * 1000)}"
    # The envelope's shape, naming no user.
    body_bytes = json.dumps(
        {
            "event_type": TEST_EVENT_TYPE,
            "data": {"destination_id": str(destination_id)},
            "user_id": None,
            "client_user_id": None,
            "team_id": str(team_id),
        }
    ).encode()
    started = time.perf_counter()
    error = None
    timeout = service.settings.webhook_timeout.total_seconds()
    try:
        connect_to = checked_address(
            target.connection["host"],
            target.port,
            service.event_destinations.allowed,
            service.event_destinations.own_addresses,
        )
        client = connect(target, connect_to, timeout)
        try:
            [outcome] = client.publish(
                [Message(routed, message_id, TEST_EVENT_TYPE, body_bytes)],
                time.monotonic() + timeout,
            )
        finally:
            client.close()
        if outcome is None:
            error = "timeout"
        elif outcome.failure is not None:
            error = outcome.failure.error
    except PublishFailed as failed:
        error = failed.error
    return {
        "success": error is None,
        "target": routed,
        "message_id": message_id,
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        "error": error,
    }
