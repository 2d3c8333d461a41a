"""A session's samples by its id (docs/data.md#sessions), as the official clients'
`sleep.get_stream_by_sleep_id` and `workouts.get_by_workout_id` read them:

- `GET /v2/timeseries/sleep/{sleep_id}/stream`: the night's heart rate, HRV, respiratory
  rate and hypnogram samples (ClientFacingSleepStream), from bedtime_start to bedtime_stop;
- `GET /v2/timeseries/workouts/{workout_id}/stream`: the workout's heart rate from
  time_start to time_end as the client's columns (ClientFacingStream: `time` in unix
  seconds, `heartrate` in bpm, one value per instant).

The id is the one the summary getters and the webhooks answer (`summary_ids.SummaryIds`);
the session index (`health_data/sessions.py`) leads from it to the user and the stored
day. The samples are the same provider's, read from the stored blocks as the timeseries
getters read them, as of `as_of` when given.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Response
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.timeseries import TimeseriesSample
from healthledger.adapters.persistence.health_data.sessions import SessionPlace
from healthledger.domain.connections.sessions import SESSION_RESOURCES, sessions_of
from healthledger.domain.errors import SummaryNotFound
from pydantic import BaseModel, ConfigDict, Field

_HR: dict[str, Any] = {"timestamp": "2026-03-01T23:40:00+00:00", "value": 58, "unit": "bpm"}
_HRV: dict[str, Any] = {"timestamp": "2026-03-02T00:00:00+00:00", "value": 46.2, "unit": "ms"}
_RR: dict[str, Any] = {"timestamp": "2026-03-02T00:00:00+00:00", "value": 14.1, "unit": "bpm"}
_STAGE: dict[str, Any] = {
    "timestamp": "2026-03-01T23:40:00+00:00",
    "start": "2026-03-01T23:40:00+00:00",
    "end": "2026-03-01T23:45:00+00:00",
    "value": 2,
    "unit": "stage",
}


class SleepStream(BaseModel):
    """The night's samples, each resource's in time order (empty: none stored)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "heartrate": [_HR],
                    "hrv": [_HRV],
                    "respiratory_rate": [_RR],
                    "hypnogram": [_STAGE],
                }
            ]
        }
    )
    heartrate: list[TimeseriesSample]
    hrv: list[TimeseriesSample]
    respiratory_rate: list[TimeseriesSample]
    hypnogram: list[TimeseriesSample] = Field(
        description="5-minute stages: 1 deep, 2 light, 3 rem, 4 awake, -1 missing data."
    )


class WorkoutStream(BaseModel):
    """The workout's samples as columns: `time[i]` is the instant of `heartrate[i]`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"time": [1772352000, 1772352060], "heartrate": [128, 134]}]
        }
    )
    time: list[int] = Field(description="Unix seconds, in order.")
    heartrate: list[int | None] = Field(description="bpm at each instant of `time`.")


SleepId = Annotated[UUID, Path(description="The sleep's id (`id` of a sleep summary).")]
WorkoutId = Annotated[UUID, Path(description="The workout's id (`id` of a workout summary).")]
_NOT_FOUND = {
    404: "Unknown id, another team's, or its user's scheduled for deletion or erased "
    "(or the session was not stored yet at `as_of`)."
}
# The sleep stream's resources, as the client names them (its `hrv`, `heartrate`...).
_SLEEP_SERIES = ("heartrate", "hrv", "respiratory_rate", "hypnogram")

router = APIRouter(tags=["timeseries"], route_class=LedgerRoute)


@router.get(
    "/v2/timeseries/sleep/{sleep_id}/stream",
    response_model=SleepStream,
    responses=error_responses(401, 404, 422, described=_NOT_FOUND),
)
def get_sleep_stream(
    service: CurrentService, sleep_id: SleepId, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The samples of the night of the sleep `sleep_id` names, of its provider, from
    bedtime_start to bedtime_stop (as they were at `as_of` when given)."""
    user_id, place = service.health_data_queries.session_place(caller.team_id, sleep_id, "sleep")
    sleep = _stored_session(service, caller.team_id, user_id, place, as_of)
    start, end = _instant(sleep, "bedtime_start"), _instant(sleep, "bedtime_stop")
    found = {
        resource: _samples_within(
            service, caller.team_id, user_id, place, resource, start, end, as_of
        )
        for resource in _SLEEP_SERIES
    }
    # The samples as stored, as the timeseries getters answer them (not re-serialized
    # through the model, which would add its absent fields as nulls).
    return _json(found)


@router.get(
    "/v2/timeseries/workouts/{workout_id}/stream",
    response_model=WorkoutStream,
    responses=error_responses(401, 404, 422, described=_NOT_FOUND),
)
def get_workout_stream(
    service: CurrentService, workout_id: WorkoutId, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The heart rate of the workout `workout_id` names, of its provider, from
    time_start to time_end, as columns (as it was at `as_of` when given)."""
    user_id, place = service.health_data_queries.session_place(
        caller.team_id, workout_id, "workouts"
    )
    workout = _stored_session(service, caller.team_id, user_id, place, as_of)
    start, end = _instant(workout, "time_start"), _instant(workout, "time_end")
    heart = _samples_within(service, caller.team_id, user_id, place, "heartrate", start, end, as_of)
    return _json(
        {
            "time": [int(_at(s["timestamp"]).timestamp()) for s in heart],
            "heartrate": [None if s.get("value") is None else round(s["value"]) for s in heart],
        }
    )


def _stored_session(
    service: Service, team_id: UUID, user_id: UUID, place: SessionPlace, as_of: datetime | None
) -> dict[str, Any]:
    """The stored sleep or workout at its place (as of `as_of`); SummaryNotFound when its
    day no longer holds it (a provider's re-sent day without it) or did not yet then."""
    days = service.health_data_queries.stored_days(
        team_id, user_id, place.resource, place.day, place.day, place.provider, as_of
    )
    for stored in days:
        value = stored.value
        if place.resource in SESSION_RESOURCES:
            value = sessions_of(place.resource, stored.day, value).get(place.key)
        if isinstance(value, dict):
            return value
    raise SummaryNotFound(f"No {place.resource} with this id.")


def _instant(session: dict[str, Any], key: str) -> datetime:
    value = session.get(key)
    if not isinstance(value, str):
        # A stored session without its bounds has no samples to answer.
        raise SummaryNotFound("This session has no time range.")
    return _at(value)


def _samples_within(
    service: Service,
    team_id: UUID,
    user_id: UUID,
    place: SessionPlace,
    resource: str,
    start: datetime,
    end: datetime,
    as_of: datetime | None,
) -> list[dict[str, Any]]:
    """The provider's samples of `resource` from `start` to `end` (inclusive), in time
    order: the days the session spans (a night starts the evening before its day)."""
    first, last = min(start.date(), place.day), max(end.date(), place.day)
    days = service.health_data_queries.stored_days(
        team_id, user_id, resource, first, last, place.provider, as_of
    )
    found = []
    for stored in days:
        for sample in stored.value if isinstance(stored.value, list) else ():
            if not isinstance(sample, dict) or not isinstance(sample.get("timestamp"), str):
                continue
            if start <= _at(sample["timestamp"]) <= end:
                found.append(sample)
    return sorted(found, key=lambda s: _at(s["timestamp"]))


def _at(text: str) -> datetime:
    """An instant of stored data; one without an offset is UTC (as the days are)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _json(value: dict[str, Any]) -> Response:
    return Response(
        json.dumps(value, separators=(",", ":")).encode(), media_type="application/json"
    )
