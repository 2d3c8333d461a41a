"""The team API's user and connection operations without HTTP: from a checked request model
to the answer the API gives.

The routes (`users.py`, `connections.py`) and the embedded facade (`adapters/embedded.py`)
both call these, so that an application embedding the service and a caller of the API get
the same rules, the same errors and the same answers, with one conversion from the read
side to the response models of `schemas.py`. What stays in the routes is HTTP only: auth,
path and query parsing, status codes, and mapping errors to bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.operations.schemas import (
    CreateUserRequest,
    DemographicsPatch,
    ResolvedUser,
    Success,
    UpdateUserRequest,
    UserList,
)
from healthledger.adapters.reference import ProviderEntry
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import FeatureNotEnabled, InvalidRequest, LedgerError
from healthledger.domain.personal_data import Demographics
from pydantic import BaseModel

DEMOGRAPHICS = "demographics"

# The bounds of a page of users (GET /v2/user's offset and limit), for the route's query
# parameters and the facade's checks alike.
MAX_USER_OFFSET = 2**31 - 1
MAX_USER_LIMIT = 500


class UndoParametersError(LedgerError):
    def __init__(self) -> None:
        super().__init__("Send exactly one of the query parameters user_id or client_user_id.")


# -- users --------------------------------------------------------------------------------


def create_user(
    service: Service, ctx: CommandContext, team_id: UUID, body: CreateUserRequest
) -> ResolvedUser:
    user = service.users.create_user(
        ctx,
        team_id,
        client_user_id=body.client_user_id,
        fallback_time_zone=body.fallback_time_zone,
        fallback_birth_date=body.fallback_birth_date,
        ingestion_start=body.ingestion_start,
        ingestion_end=body.ingestion_end,
    )
    # Just created: it has no connections to look up.
    return resolved_user(service, team_id, user.id, new=True)


def resolved_user(
    service: Service,
    team_id: UUID,
    user_id: UUID,
    *,
    new: bool = False,
    as_of: datetime | None = None,
) -> ResolvedUser:
    """The resolved user (spec 2.3); with `as_of`, as it was answered at that instant."""
    if as_of is not None:
        return ResolvedUser.model_validate(
            reads_as_of(service, as_of).resolved_user(team_id, user_id)
        )
    return ResolvedUser.model_validate(
        service.user_queries.resolved_user(team_id, user_id, new=new)
    )


def resolved_by_client_user_id(
    service: Service, team_id: UUID, client_user_id: str
) -> ResolvedUser:
    return ResolvedUser.model_validate(service.user_queries.resolve(team_id, client_user_id))


def user_page(service: Service, team_id: UUID, offset: int, limit: int) -> UserList:
    users, total = service.user_queries.list_users(team_id, offset, limit)
    return UserList.model_validate(
        {"users": users, "total": total, "offset": offset, "limit": limit}
    )


def update_user(
    service: Service, ctx: CommandContext, team_id: UUID, user_id: UUID, body: UpdateUserRequest
) -> None:
    # Only the fields that were sent: a field sent as null clears it, one left out stays.
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    service.users.update_user(ctx, team_id, user_id, changes)


def delete_user(
    service: Service,
    ctx: CommandContext,
    team_id: UUID,
    user_id: UUID,
    *,
    reason: str | None = None,
    ticket: str | None = None,
) -> Success:
    """Start the user's grace period; `reason` (sealed with the user's key) and `ticket`
    (a reference into the caller's records) are recorded on the deletion, if given."""
    service.users.delete_user(ctx, team_id, user_id, reason=reason, ticket=ticket)
    return Success(success=True)


def undo_delete(
    service: Service,
    ctx: CommandContext,
    team_id: UUID,
    user_id: UUID | None,
    client_user_id: str | None,
) -> Success:
    """Restore a deleted user inside its grace period, named by exactly one of its ids."""
    if (user_id is None) == (client_user_id is None):
        raise UndoParametersError()
    if user_id is None:
        assert client_user_id is not None
        user_id = service.user_queries.pending_user_id(team_id, client_user_id)
    service.users.undo_deletion(ctx, team_id, user_id)
    return Success(success=True)


# -- demographics (closed beta) -----------------------------------------------------------


def require_feature(service: Service, team_id: UUID, feature: str) -> None:
    if feature not in service.team_queries.features(team_id):
        raise FeatureNotEnabled(feature)


def record_demographics(
    service: Service, ctx: CommandContext, team_id: UUID, user_id: UUID, body: DemographicsPatch
) -> Demographics:
    """Merge the fields sent into what is recorded; the merged record. It is checked in
    the domain: an incomplete one raises pydantic's ValidationError, and nothing is
    recorded. Answered through `demographics_answer` (the routes and the facade)."""
    require_feature(service, team_id, DEMOGRAPHICS)
    fields = body.model_dump(mode="json", include=body.model_fields_set)
    return service.users.record_demographics(ctx, team_id, user_id, fields)


def recorded_demographics(service: Service, team_id: UUID, user_id: UUID) -> dict[str, Any]:
    """The user's demographics as recorded (checked against the model when they were):
    not checked again, so that values recorded before a rule was added still read back.
    Answered through `demographics_answer` (the routes and the facade)."""
    require_feature(service, team_id, DEMOGRAPHICS)
    return service.user_queries.demographics(team_id, user_id)


# -- connections --------------------------------------------------------------------------


def known_provider(service: Service, provider: str, location: str) -> ProviderEntry:
    entry = service.catalog.get(provider)
    if entry is None:
        raise InvalidRequest("Unknown provider slug.", "provider", location)
    return entry


def connect_demo(
    service: Service,
    ctx: CommandContext,
    team_id: UUID,
    user_id: UUID,
    provider: str,
    demo_failures: Mapping[str, BaseModel] | None,
) -> dict[str, Any]:
    """Connect a simulated device of a demo provider; `demo_failures` (resource -> the
    DemoFailure its pulls meet) must name resources the provider offers."""
    entry = known_provider(service, provider, "body")
    if not entry.demo:
        raise InvalidRequest(
            "This provider has no demo device; see the catalog for the demo ones.",
            "provider",
        )
    failures = demo_failures or {}
    unknown = sorted(set(failures) - set(entry.supported_resources))
    if unknown:
        raise InvalidRequest(
            f"demo_failures names resources this provider does not offer: {unknown}.",
            "demo_failures",
        )
    service.connections.connect_demo(
        ctx,
        team_id,
        user_id,
        entry.slug,
        entry.supported_resources,
        {resource: failure.model_dump() for resource, failure in failures.items()},
    )
    return {"success": True, "detail": f"Connected a demo {entry.name} device."}


def user_providers(
    service: Service, team_id: UUID, user_id: UUID, *, as_of: datetime | None = None
) -> dict[str, Any]:
    """Spec 2.2: the live user's connections (deregistered ones are not listed); with
    `as_of`, as they were answered at that instant."""
    if as_of is not None:
        reads = reads_as_of(service, as_of)
        reads.load_live(team_id, user_id)
        return {"providers": reads.providers_of(user_id)}
    service.users.load_live(team_id, user_id)
    return {"providers": service.connection_queries.providers_of(user_id)}


def deregister(
    service: Service, ctx: CommandContext, team_id: UUID, user_id: UUID, provider: str
) -> Success:
    known_provider(service, provider, "path")
    service.connections.deregister(ctx, team_id, user_id, provider)
    return Success(success=True)
