"""The timeseries getters (docs/data.md): `GET /v2/timeseries/{user_id}/{resource}`, a
list of samples `{timestamp, value, unit, type?}` (interval resources also `start` and
`end`; blood pressure `systolic` and `diastolic`), and `.../grouped`, the samples grouped
by provider with their source (`{groups: {provider: [{source, data}]}, next,
next_cursor}`), as the official client's `vitals.*` methods read them.

Samples are stored in columns, a month of one provider per sealed block (ADR 0033); a read
gets each day's canonical JSON made from the columns by Arrow. A read of whole days from
one provider passes each day's JSON on without parsing it: the answer is the days' lists
joined. Reads that name a time of day,
or span several providers (merged in time order), parse the samples.
"""

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, get_args
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.cursors import InvalidCursor
from healthledger.adapters.http.date_ranges import DateRange, EndDate, StartDate, date_range
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.summaries import ProviderFilter, SummarySource
from healthledger.adapters.operations.source_priorities import source_orders
from healthledger.adapters.reference import Resource
from healthledger.domain.connections.health_data import StoredDay
from healthledger.domain.connections.summaries import SUMMARY_OBJECTS, json_default
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.teams.source_priorities import provider_rank
from pydantic import BaseModel, ConfigDict, Field

# Resources of the catalog that are not timeseries: summaries, their per-session streams
# (read through their sleep or workout), and what is not health data.
_NOT_TIMESERIES = SUMMARY_OBJECTS | {
    "sleep_stream",
    "workout_stream",
    "connection",
    "order",
    "result",
    "match_review",
    "appointment",
    "device",
    "device_legacy",
}
TIMESERIES_RESOURCES = tuple(r for r in get_args(Resource) if r not in _NOT_TIMESERIES)
# The official client's names of two of them in its paths.
ALIASES = {"body_weight": "weight", "body_fat": "fat"}
PATH_NAMES = tuple(sorted({*TIMESERIES_RESOURCES, *ALIASES}))


class TimeseriesSample(BaseModel):
    """One sample, as the provider's device recorded it."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {"timestamp": "2026-03-01T07:42:00+00:00", "value": 64, "unit": "bpm"},
                {
                    "timestamp": "2026-03-01T08:00:00+00:00",
                    "start": "2026-03-01T08:00:00+00:00",
                    "end": "2026-03-01T09:00:00+00:00",
                    "value": 812,
                    "unit": "count",
                },
            ]
        },
    )
    timestamp: datetime
    value: float | None = Field(default=None, description="Absent for blood pressure only.")
    unit: str
    type: str | None = Field(default=None, description="The sample's kind, where it has one.")
    start: datetime | None = Field(default=None, description="Interval resources: its start.")
    end: datetime | None = Field(default=None, description="Interval resources: its end.")
    systolic: float | None = Field(default=None, description="Blood pressure only.")
    diastolic: float | None = Field(default=None, description="Blood pressure only.")


class SourceSamples(BaseModel):
    source: SummarySource
    data: list[TimeseriesSample]


class GroupedSamples(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "groups": {
                        "oura": [
                            {
                                "source": {"provider": "oura", "type": "ring", "app_id": None},
                                "data": [
                                    {
                                        "timestamp": "2026-03-01T07:42:00+00:00",
                                        "value": 64,
                                        "unit": "bpm",
                                    }
                                ],
                            }
                        ]
                    },
                    "next": None,
                    "next_cursor": None,
                }
            ]
        }
    )
    groups: dict[str, list[SourceSamples]] = Field(description="provider slug -> its samples.")
    next: str | None = Field(description="Always null: one page holds the whole range.")
    next_cursor: str | None = Field(description="Always null: one page holds the whole range.")


UserId = Annotated[UUID, Path(description="The user's id.")]
# The Literal is built from the catalog at import (one list, not two), which pydantic reads
# at run time and a static checker cannot.
ResourceName = Annotated[
    Literal[PATH_NAMES],  # type: ignore[valid-type]
    Path(description="A timeseries resource of the catalog (body_weight and body_fat too)."),
]
CursorParameter = Annotated[
    str | None,
    Query(max_length=512, description="Never issued: every page is the last."),
]


def _stored(
    service: Service,
    team_id: UUID,
    user_id: UUID,
    resource: str,
    days: DateRange,
    provider: str | None,
    as_of: datetime | None,
) -> list[StoredDay]:
    if provider is not None and provider not in service.catalog:
        raise InvalidRequest("Unknown provider slug.", "provider", "query")
    return service.health_data_queries.stored_days(
        team_id,
        user_id,
        ALIASES.get(resource, resource),
        days.first_day,
        days.last_day,
        provider,
        as_of,
    )


router = APIRouter(tags=["timeseries"], route_class=LedgerRoute)
RESPONSES = error_responses(401, 404, 422, described=USER_NOT_FOUND)


@router.get(
    "/v2/timeseries/{user_id}/{resource}",
    response_model=list[TimeseriesSample],
    responses=RESPONSES,
)
def get_timeseries(
    service: CurrentService,
    user_id: UserId,
    resource: ResourceName,
    caller: TeamApiCaller,
    start_date: StartDate,
    as_of: TeamAsOf,
    end_date: EndDate = None,
    provider: ProviderFilter = None,
) -> Any:
    """The user's samples of the resource from start_date to end_date, in time order,
    of every provider (or of one: `grouped` tells them apart); as they were at `as_of`
    when given."""
    days = date_range(start_date, end_date)
    return _answer(samples_json(service, caller.team_id, user_id, resource, days, provider, as_of))


def samples_json(
    service: Service,
    team_id: UUID,
    user_id: UUID,
    resource: str,
    days: DateRange,
    provider: str | None,
    as_of: datetime | None = None,
) -> bytes:
    """The samples' JSON array as the route answers it (the embedding facade's too): one
    provider's days joined as stored, several merged in time order, the samples of one
    instant in the order of the team's source priorities."""
    found = _stored(service, team_id, user_id, resource, days, provider, as_of)
    if len({d.provider for d in found}) > 1:
        rank = _timeseries_rank(service, team_id, as_of)
        merged = sorted(
            ((rank(d.provider), s) for d in found for s in _samples(d, days)),
            key=lambda ranked: (_instant(ranked[1]), ranked[0]),
        )
        return json.dumps([s for _, s in merged], separators=(",", ":")).encode()
    return _joined(found, days)


@router.get(
    "/v2/timeseries/{user_id}/{resource}/grouped",
    response_model=GroupedSamples,
    responses=error_responses(400, 401, 404, 422, described=USER_NOT_FOUND),
)
def get_grouped_timeseries(
    service: CurrentService,
    user_id: UserId,
    resource: ResourceName,
    caller: TeamApiCaller,
    start_date: StartDate,
    as_of: TeamAsOf,
    end_date: EndDate = None,
    provider: ProviderFilter = None,
    next_cursor: CursorParameter = None,
    cursor: CursorParameter = None,
) -> Any:
    """The user's samples of the resource from start_date to end_date, per provider
    with its source context (as of now, spec 2.13), each in time order."""
    if next_cursor or cursor:
        raise InvalidCursor()  # none is ever issued: the whole range is one page
    days = date_range(start_date, end_date)
    found = _stored(service, caller.team_id, user_id, resource, days, provider, as_of)
    by_provider: dict[str, list[StoredDay]] = {}
    for day in found:
        by_provider.setdefault(day.provider, []).append(day)
    sources = service.health_data_queries.sources(by_provider, as_of)
    rank = (
        _timeseries_rank(service, caller.team_id, as_of)
        if len(by_provider) > 1
        else provider_rank(())
    )
    groups = b",".join(
        json.dumps(slug).encode()
        + b':[{"source":'
        + json.dumps(sources[slug], separators=(",", ":"), default=json_default).encode()
        + b',"data":'
        + _joined(of_provider, days)
        + b"}]"
        for slug, of_provider in sorted(by_provider.items(), key=lambda p: (rank(p[0]), p[0]))
    )
    return _answer(b'{"groups":{' + groups + b'},"next":null,"next_cursor":null}')


def _timeseries_rank(
    service: Service, team_id: UUID, as_of: datetime | None
) -> Callable[[str], int]:
    """The team's order of providers for timeseries (its source priorities, as of the
    read's instant), as a sort key: read only when several providers answer a read."""
    return provider_rank(source_orders(service, team_id, as_of).get("timeseries", ()))


def _joined(days: list[StoredDay], within: DateRange) -> bytes:
    """One provider's samples of `days` (in day order) as one JSON list: each day's stored
    list passed on as it is, unless the range cuts through a day."""
    if not within.whole_days or any(not d.plaintext.startswith(b"[") for d in days):
        samples = [s for d in days for s in _samples(d, within)]
        return json.dumps(samples, separators=(",", ":")).encode()
    parts = [d.plaintext[1:-1] for d in days if len(d.plaintext) > 2]
    return b"[" + b",".join(parts) + b"]"


def _samples(day: StoredDay, within: DateRange) -> list[dict[str, Any]]:
    value = day.value
    samples = value if isinstance(value, list) else []
    if within.whole_days:
        return samples
    return [s for s in samples if within.holds(_instant(s))]


def _instant(sample: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(sample["timestamp"])


def _answer(body: bytes) -> Response:
    return Response(body, media_type="application/json")
