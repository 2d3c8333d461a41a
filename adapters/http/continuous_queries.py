"""Continuous queries on the team API (issue 34, ADR 0044, docs/data.md#continuous-queries):
the official clients' two reads, `aggregate.get_result_table_for_continuous_query` and
`aggregate.get_task_history_for_continuous_query`, and what the clients have no method
for: registering a query for a user, listing, reading and deleting it. The team's own key
manages its own queries, as it manages its webhooks; the aggregate query's closed-beta
switch covers them (the same engine answers both).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from healthledger.adapters.http.aggregate_query import AggregationResult, beta_caller
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamCaller
from healthledger.adapters.http.cursors import CursorCodec, InvalidCursor
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.persistence.queries.continuous_queries import ContinuousQueryStore
from healthledger.domain.health_queries.continuous import (
    ContinuousQuery,
    ContinuousQueryDefinition,
    NoResultYet,
    Task,
    TaskStatus,
)
from healthledger.domain.health_queries.query import InvalidQuery
from pydantic import BaseModel, ConfigDict, Field

BASE = "/aggregate/v1/user/{user_id}/continuous_query"
ONE = BASE + "/{query_id_or_slug}"
NOT_FOUND = {404: f"{USER_NOT_FOUND[404]} Or no continuous query of the user by that id or slug."}
Caller = Annotated[TeamCaller, Depends(beta_caller)]
IdOrSlug = Annotated[str, Path(min_length=1, max_length=64)]


_QUERY_EXAMPLE: dict[str, Any] = {
    "id": "6a1f1b8e-3c41-4f0e-9a57-2f4d8c9e1b23",
    "user_id": "0d4c8f5e-2b7a-4c19-8e3d-5f6a7b8c9d01",
    "slug": "weekly_heartrate",
    "query": {
        "select": [
            {"group_key": "*"},
            {"func": "mean", "arg": {"timeseries": "heartrate", "field": "value"}},
        ],
        "group_by": [{"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}}],
    },
    "past": {"value": 7, "unit": "day"},
    "interval_minutes": 60,
    "config": None,
    "created_at": "2026-11-30T01:00:00+00:00",
    "result_at": "2026-11-30T02:00:04+00:00",
}
_TASK_EXAMPLE: dict[str, Any] = {
    "query_id": "6a1f1b8e-3c41-4f0e-9a57-2f4d8c9e1b23",
    "user_id": "0d4c8f5e-2b7a-4c19-8e3d-5f6a7b8c9d01",
    "status": "completed",
    "scheduled_at": "2026-11-30T02:00:00+00:00",
    "started_at": "2026-11-30T02:00:02+00:00",
    "ended_at": "2026-11-30T02:00:04+00:00",
    "error_details": None,
}


class ContinuousQueryOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_QUERY_EXAMPLE]})

    id: UUID
    user_id: UUID
    slug: str
    query: dict[str, Any]
    past: dict[str, Any]
    interval_minutes: int
    config: dict[str, Any] | None = None
    created_at: datetime
    result_at: datetime | None = Field(description="When the latest completed run ended.")


class ContinuousQueryList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"data": [_QUERY_EXAMPLE]}]})

    data: list[ContinuousQueryOut]


class TaskEntry(BaseModel):
    """The client's ContinuousQueryTaskHistoryEntry."""

    query_id: UUID
    user_id: UUID
    status: TaskStatus
    scheduled_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error_details: str | None = None


class TaskHistory(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"data": [_TASK_EXAMPLE], "next_cursor": None}]}
    )

    data: list[TaskEntry]
    next_cursor: str | None = None


def store(service: CurrentService) -> ContinuousQueryStore:
    return ContinuousQueryStore(service.db)


Store = Annotated[ContinuousQueryStore, Depends(store)]


def _out(query: ContinuousQuery) -> ContinuousQueryOut:
    definition = query.definition.model_dump(mode="json", exclude_none=True)
    return ContinuousQueryOut(
        id=query.query_id,
        user_id=query.user_id,
        slug=definition["slug"],
        query=definition["query"],
        past=definition["past"],
        interval_minutes=definition["interval_minutes"],
        config=definition.get("config"),
        created_at=query.created_at,
        result_at=query.result_at,
    )


def _entry(task: Task) -> TaskEntry:
    return TaskEntry(
        query_id=task.query_id,
        user_id=task.user_id,
        status=task.status,
        scheduled_at=task.scheduled_at,
        started_at=task.started_at,
        ended_at=task.ended_at,
        error_details=task.error_details,
    )


router = APIRouter(tags=["aggregate"], route_class=LedgerRoute)


@router.post(
    BASE,
    status_code=201,
    response_model=ContinuousQueryOut,
    responses=error_responses(
        401,
        403,
        404,
        409,
        422,
        described={
            **USER_NOT_FOUND,
            409: "The user already has a query with this slug, or holds as many as it may.",
            422: "The body is not a query the aggregate query would run (its position is "
            "named), or the interval is out of bounds.",
        },
    ),
)
def register_continuous_query(
    service: CurrentService,
    caller: Caller,
    queries: Store,
    user_id: UUID,
    body: ContinuousQueryDefinition,
) -> ContinuousQueryOut:
    """Register an aggregate query for the user, run now and then every
    `interval_minutes`, each run over the `past` up to the end of its day (UTC)."""
    try:
        body.check(service.clock().date())
    except InvalidQuery as error:
        # The engine names the query as the aggregate query's first; here it is `query`.
        loc = list(error.loc)
        if loc[:3] == ["body", "queries", 0]:
            loc = ["body", "query", *loc[3:]]
        raise RequestValidationError(
            [{"type": "value_error", "loc": loc, "msg": error.message, "input": None}]
        ) from error
    return _out(queries.create(caller.team_id, user_id, body, service.clock()))


@router.get(
    BASE,
    response_model=ContinuousQueryList,
    # What is kept now: no earlier runs' state is kept to travel to.
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(401, 403, 404, 422, described=USER_NOT_FOUND),
)
def list_continuous_queries(caller: Caller, queries: Store, user_id: UUID) -> ContinuousQueryList:
    """The user's continuous queries, oldest first."""
    return ContinuousQueryList(
        data=[_out(query) for query in queries.queries(caller.team_id, user_id)]
    )


@router.get(
    ONE,
    response_model=ContinuousQueryOut,
    # What is kept now: no earlier runs' state is kept to travel to.
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(401, 403, 404, 422, described=NOT_FOUND),
)
def get_continuous_query(
    caller: Caller, queries: Store, user_id: UUID, query_id_or_slug: IdOrSlug
) -> ContinuousQueryOut:
    """One of the user's continuous queries, by its id or slug."""
    return _out(queries.find(caller.team_id, user_id, query_id_or_slug))


@router.delete(
    ONE,
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 403, 404, 422, described=NOT_FOUND),
)
def delete_continuous_query(
    caller: Caller, queries: Store, user_id: UUID, query_id_or_slug: IdOrSlug
) -> Response:
    """The query, its latest result and its task history, gone; a run going on stores
    nothing."""
    queries.delete(caller.team_id, user_id, query_id_or_slug)
    return Response(status_code=204)


@router.get(
    ONE + "/result_table",
    response_model=AggregationResult,
    # What is kept now: no earlier runs' state is kept to travel to.
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(
        401,
        403,
        404,
        422,
        described={404: f"{NOT_FOUND[404]} Or no run of it has completed yet."},
    ),
)
def get_result_table_for_continuous_query(
    service: CurrentService,
    caller: Caller,
    queries: Store,
    user_id: UUID,
    query_id_or_slug: IdOrSlug,
) -> AggregationResult:
    """The table of the query's latest completed run (the client's AggregationResult)."""
    sealed = queries.sealed_result(caller.team_id, user_id, query_id_or_slug)
    table = None if sealed is None else service.key_store.open(user_id, sealed)
    if table is None:  # no run completed (or the key went with an erasure meanwhile)
        raise NoResultYet()
    return AggregationResult(table=table)


@router.get(
    ONE + "/task_history",
    response_model=TaskHistory,
    # What is kept now: no earlier runs' state is kept to travel to.
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(400, 401, 403, 404, 422, described=NOT_FOUND),
)
def get_task_history_for_continuous_query(
    caller: Caller,
    queries: Store,
    cursors: Cursors,
    user_id: UUID,
    query_id_or_slug: IdOrSlug,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> TaskHistory:
    """The query's runs, the latest scheduled first: the next one (`scheduled`), one
    going on (`started`), and those ended (`completed`, or `error` with its reason)."""
    scope = f"continuous_query_tasks:{caller.team_id}:{user_id}:{query_id_or_slug}:{limit}"
    after = _after(cursors, next_cursor, scope)
    tasks = queries.tasks(caller.team_id, user_id, query_id_or_slug, after, limit)
    more = len(tasks) > limit
    tasks = tasks[:limit]
    cursor = (
        cursors.encode(
            {"s": tasks[-1].scheduled_at.isoformat(), "t": str(tasks[-1].task_id)}, scope
        )
        if more
        else None
    )
    return TaskHistory(data=[_entry(task) for task in tasks], next_cursor=cursor)


def _after(cursors: CursorCodec, token: str | None, scope: str) -> tuple[datetime, UUID] | None:
    if not token:
        return None
    try:
        payload = cursors.decode(token, scope)
        return datetime.fromisoformat(payload["s"]), UUID(payload["t"])
    except (KeyError, TypeError, ValueError):
        raise InvalidCursor() from None
