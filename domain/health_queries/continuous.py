"""Continuous queries (issue 34, ADR 0044): an aggregate query a team registers for one of
its users, which the scheduler runs again every `interval_minutes`. Each run (a task) is
the query anchored at the day the run runs (UTC), over the `past` it names: the same
window, moved on. The latest completed run's table is what
`aggregate.get_result_table_for_continuous_query` reads; the runs themselves are its
`get_task_history_for_continuous_query`.

One query per registration: the official client's answer holds one table
(`AggregationResult`). The query is checked as the aggregate query checks it (its
`Plan`) when it is registered, so that a run fails only for what changes meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated
from uuid import UUID

from healthledger.domain.errors import LedgerError
from healthledger.domain.health_queries.query import (
    AggregateQueryRequest,
    Period,
    Query,
    QueryConfig,
    RelativeTimeframe,
    plan_request,
)
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# How often a query runs, at least and at most: more often than every five minutes would be
# a poll of the health data, not a schedule; once a week is the longest that still reads
# as a "continuous" result.
MIN_INTERVAL_MINUTES = 5
MAX_INTERVAL_MINUTES = 7 * 24 * 60
# Continuous queries one user holds at most (each runs on its own schedule).
MAX_PER_USER = 20

QuerySlug = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_\-]{0,63}$")]


class TaskStatus(StrEnum):
    """The client's ContinuousQueryTaskStatus."""

    scheduled = "scheduled"
    started = "started"
    completed = "completed"
    error = "error"


class ContinuousQueryNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Continuous query not found for this user.")


class ContinuousQuerySlugTaken(LedgerError):
    def __init__(self) -> None:
        super().__init__("The user already has a continuous query with this slug.")


class TooManyContinuousQueries(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            f"The user already has {MAX_PER_USER} continuous queries: delete one first."
        )


class NoResultYet(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "The continuous query has no completed run yet: its task history says when "
            "the next one is scheduled."
        )


class ContinuousQueryDefinition(BaseModel):
    """What a team registers: a slug of its choosing, one aggregate query, how far back
    each run reaches, and how often it runs."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "slug": "weekly_heartrate",
                    "past": {"value": 7, "unit": "day"},
                    "interval_minutes": 60,
                    "query": {
                        "select": [
                            {"group_key": "*"},
                            {
                                "func": "mean",
                                "arg": {"timeseries": "heartrate", "field": "value"},
                            },
                        ],
                        "group_by": [
                            {
                                "date_trunc": {"value": 1, "unit": "day"},
                                "arg": {"index": "timeseries"},
                            }
                        ],
                    },
                }
            ]
        },
    )

    slug: QuerySlug = Field(
        description="The team's name for the query, unique per user: the client's "
        "`query_id_or_slug` takes it or the query's id."
    )
    query: Query
    past: Period = Field(
        description="How far back each run reaches from the end of the day it runs (UTC)."
    )
    interval_minutes: Annotated[
        int, Field(ge=MIN_INTERVAL_MINUTES, le=MAX_INTERVAL_MINUTES, examples=[60])
    ]
    config: QueryConfig | None = None

    def request_on(self, day: date) -> AggregateQueryRequest:
        """The aggregate query a run on `day` (UTC) answers."""
        return AggregateQueryRequest(
            timeframe=RelativeTimeframe(anchor=day, past=self.past),
            queries=[self.query],
            config=self.config,
        )

    def check(self, today: date) -> None:
        """InvalidQuery (a 422 naming where) for a query the engine would refuse; the
        locations are those of the registration's body."""
        plan_request(self.request_on(today))


@dataclass(frozen=True)
class ContinuousQuery:
    query_id: UUID
    team_id: UUID
    user_id: UUID
    definition: ContinuousQueryDefinition
    created_at: datetime
    result_at: datetime | None


@dataclass(frozen=True)
class Task:
    """One run: the client's ContinuousQueryTaskHistoryEntry."""

    task_id: UUID
    query_id: UUID
    user_id: UUID
    status: TaskStatus
    scheduled_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    error_details: str | None
