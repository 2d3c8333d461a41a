"""The audit API of the team API: `GET /v2/audit/user/{user_id}`, a user's full history
with everything that belongs to it (its claim, connections, pulls, link tokens and the
webhook deliveries about it), for a user in any state: live, pending or erased (this is
the audit). Paged with signed cursors bound to the listing's filters."""

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.compliance.audit import USER_EVENT_TYPES, user_audit, user_team
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, Instant
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.cursors import InvalidCursor
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.domain.errors import InvalidRequest, UserNotFound
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

MAX_LIMIT = 500

_ENTRY_EXAMPLE: JsonDict = {
    "stream_kind": "connection",
    "stream_id": "1f0c6d2e-8a43-5b7e-9c21-6d4f3b2a1e90",
    "timestamp": "2026-03-01T12:05:00Z",
    "event": "Connection.Created",
    "version": 1,
    "actor": "team_api_key:0b25f164-c3f0-42ba-8963-2c6861afdd36",
    "request_id": "req-c0f4d7a5-5c95-4738-a84d-2ddab9208858",
    "changes": {
        "user_id": "82dac960-eabb-47ed-aa0c-3a093e6d1a68",
        "team_id": "6c38d542-7c4b-444c-b12e-d3b00903bbef",
        "provider": "oura",
        "sealed_external_user_id": ERASED_PLACEHOLDER,
        "resource_availability": {"sleep": {"status": "available"}},
        "demo": True,
    },
}


class AuditEntryView(BaseModel):
    """One event of the user's history or of a stream that belongs to the user."""

    model_config = ConfigDict(json_schema_extra={"examples": [_ENTRY_EXAMPLE]})

    stream_kind: str = Field(
        description="user, claim, connection, pull, link_token or webhook_delivery."
    )
    stream_id: UUID
    timestamp: datetime
    event: str = Field(description="`<Aggregate>.<Event>`, as the event_type filter names it.")
    version: int = Field(description="The event's version in its stream.")
    actor: str
    request_id: str
    changes: dict[str, Any] = Field(
        description="What the event recorded. A personal value (or a secret) is never "
        "shown: `<personal data: sealed>` while its key exists, `<personal data: erased>` "
        "once the user's erasure destroyed it."
    )


class UserAuditPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "82dac960-eabb-47ed-aa0c-3a093e6d1a68",
                    "data": [_ENTRY_EXAMPLE],
                    "next_cursor": None,
                }
            ]
        }
    )

    user_id: UUID
    data: list[AuditEntryView] = Field(description="In time order, then in log order.")
    next_cursor: str | None = Field(description="The next page's cursor; null on the last.")


router = APIRouter(tags=["audit"], route_class=LedgerRoute)


@router.get(
    "/v2/audit/user/{user_id:uuid}",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=UserAuditPage,
    responses=error_responses(
        400, 401, 404, 422, described={404: "Unknown user, or another team's user."}
    ),
)
def audit_user(
    service: CurrentService,
    cursors: Cursors,
    user_id: UUID,
    caller: TeamApiCaller,
    start: Annotated[
        Instant, Query(description="Events at or after this instant (ISO 8601).")
    ] = None,
    end: Annotated[Instant, Query(description="Events before this instant (ISO 8601).")] = None,
    event_type: Annotated[
        list[str] | None,
        Query(description="Only these events (repeat it), e.g. User.Deleted."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> Any:
    """A user's full history, live, pending or erased: its own events and those of
    its claim, connections, pulls, link tokens and the webhook deliveries about it,
    each with its time, actor, request id and what changed (personal values as
    placeholders)."""
    if user_team(service, user_id) != caller.team_id:
        raise UserNotFound()  # unknown, or another team's: the same 404
    if start is not None and end is not None and start > end:
        raise InvalidRequest("start must not be after end.", "start", "query")
    names = sorted(set(event_type or ()))
    if any(name not in USER_EVENT_TYPES for name in names):
        # The value is not repeated: errors never echo what a caller sent.
        raise InvalidRequest(
            "event_type must name an event of a user's audit, e.g. User.Deleted (docs/events.md).",
            "event_type",
            "query",
        )
    scope = f"audit_user:{caller.team_id}:{user_id}:{start}:{end}:{','.join(names)}:{limit}"
    after = None
    if next_cursor:
        position = cursors.decode(next_cursor, scope)
        try:
            after = (datetime.fromisoformat(position["t"]), int(position["n"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidCursor() from None
    page = user_audit(
        service,
        user_id,
        start=start,
        end=end,
        event_types=names,
        after=after,
        limit=limit,
    )
    cursor = None
    if page.next_after is not None:
        at, notification_id = page.next_after
        cursor = cursors.encode({"t": at.isoformat(), "n": notification_id}, scope)
    return {"user_id": user_id, "data": [vars(e) for e in page.entries], "next_cursor": cursor}
