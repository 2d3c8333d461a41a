"""The `as_of` query parameter of every GET of both APIs: answer as the same call answered
at that instant, from the log (`adapters/compliance/time_travel.py`), or say that the read
cannot.

Every GET takes it through one of these dependencies, after its caller's key is checked:

- `TeamAsOf` (team API) and `ManagementAsOf` (management API), for the reads that travel:
  the instant, checked; None when not given.
- `TEAM_READ_REFUSES_AS_OF` and `MANAGEMENT_READ_REFUSES_AS_OF`, in the `dependencies` of
  the reads that do not travel yet: the same checks, then a 422 (`NOT_TRAVELLING`), never
  an answer about the present.

An instant is refused with a 422 on `["query", "as_of"]`, one message per case: not an ISO
8601 instant with an offset (or out of range), in the future, before the caller's team
existed (on the management API: the team the route names, else the organization)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from healthledger.adapters.compliance.time_travel import (
    INSTANT_EXAMPLE,
    NOT_TRAVELLING,
    parse_instant,
    refuse_instant,
    stream_began,
)
from healthledger.adapters.composition import Service
from healthledger.adapters.http.auth import ManagementApiCaller, TeamApiCaller, UploadApiCaller
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.errors import InvalidRequest
from pydantic import BeforeValidator

# Longer than any ISO 8601 instant (with microseconds and an offset).
_MAX_LENGTH = 64


def _instant(value: Any) -> datetime | None:
    # Only the ISO 8601 text: pydantic's own datetime parsing would also take a number
    # (Unix time) or an instant without an offset (which instant is that?).
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > _MAX_LENGTH:
        raise ValueError(f"an instant is ISO 8601 with an offset, e.g. {INSTANT_EXAMPLE}")
    return parse_instant(value)


# An instant in a query parameter, for every route that takes one (`as_of`, the audit's
# `start` and `end`).
Instant = Annotated[datetime | None, BeforeValidator(_instant)]

_REFUSED = (
    "a future instant, or one before the team existed, is a 422 (an answer about an "
    "instant never changes once given)."
)

AsOf = Annotated[
    Instant,
    Query(
        description="Ours: answer as this call answered at this instant (ISO 8601, with an "
        "offset), from the event log; " + _REFUSED + " Personal values erased since show "
        "as `<personal data: erased>`.",
        examples=[INSTANT_EXAMPLE],
    ),
]

AsOfRefused = Annotated[
    Instant,
    Query(
        description="Ours: this read does not travel in time yet: any valid `as_of` is a 422 "
        "saying so (never an answer about the present); " + _REFUSED,
        examples=[INSTANT_EXAMPLE],
    ),
]


# -- the team API ------------------------------------------------------------------------


async def team_as_of(
    service: CurrentService, caller: TeamApiCaller, as_of: AsOf = None
) -> datetime | None:
    """The instant a team API read answers as of, checked; None for now."""
    return await _checked(service, caller.team_id, as_of)


async def upload_as_of(
    service: CurrentService, caller: UploadApiCaller, as_of: AsOf = None
) -> datetime | None:
    """`team_as_of` for the reads a mobile SDK's sign-in token may make too."""
    return await _checked(service, caller.team_id, as_of)


async def _checked(service: Service, team_id: UUID, as_of: datetime | None) -> datetime | None:
    # Async, the check (which reads the log) on the thread pool: a read without `as_of`,
    # the usual one, makes no hop to a thread and back for it.
    if as_of is not None:
        await run_in_threadpool(
            lambda: refuse_instant(service, as_of, began=stream_began(service, team_id))
        )
    return as_of


async def team_read_as_of_refused(
    service: CurrentService, caller: TeamApiCaller, as_of: AsOfRefused = None
) -> None:
    if as_of is not None:
        await team_as_of(service, caller, as_of)  # the same 422s for a bad instant first
        raise InvalidRequest(NOT_TRAVELLING, "as_of", "query")


TeamAsOf = Annotated[datetime | None, Depends(team_as_of)]
UploadAsOf = Annotated[datetime | None, Depends(upload_as_of)]
# In a read's `dependencies`: it declares `as_of` and refuses it.
TEAM_READ_REFUSES_AS_OF = Depends(team_read_as_of_refused)


# -- the management API ------------------------------------------------------------------


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def management_as_of(
    request: Request, service: CurrentService, caller: ManagementApiCaller, as_of: AsOf = None
) -> datetime | None:
    """The instant a management API read answers as of, checked; None for now. "Before it
    existed" is the route's team's creation (a `team_id` in the path or the query), else
    the organization's, and only for one the key may reach: for any other the route's own
    404 answers, which says nothing about when it was made."""
    if as_of is None:
        return None
    org_id = _uuid(request.path_params.get("org_id"))
    team_id = _uuid(request.path_params.get("team_id", request.query_params.get("team_id")))
    began, what = None, "organization"
    if org_id == caller.org_id:
        began = stream_began(service, org_id)
        if team_id is not None:
            team = service.team_queries.team(team_id)
            reachable = caller.is_org_admin or team_id in caller.team_ids
            if team is not None and team["org_id"] == org_id and reachable:
                began, what = team["created_on"], "team"
    refuse_instant(service, as_of, began=began, what=what)
    return as_of


def management_read_as_of_refused(
    request: Request,
    service: CurrentService,
    caller: ManagementApiCaller,
    as_of: AsOfRefused = None,
) -> None:
    if as_of is not None:
        management_as_of(request, service, caller, as_of)
        raise InvalidRequest(NOT_TRAVELLING, "as_of", "query")


ManagementAsOf = Annotated[datetime | None, Depends(management_as_of)]
MANAGEMENT_READ_REFUSES_AS_OF = Depends(management_read_as_of_refused)
