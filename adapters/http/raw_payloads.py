"""The raw getters (issue 34; docs/data.md#raw-payloads): `GET
/v2/summary/{sleep,activity,workouts,body,profile}/{user_id}/raw` and
`/v2/summary/devices/{user_id}/raw`, in the shapes the official clients' `*.get_raw` read
(RawSleep, RawActivity, RawWorkout, RawBody, RawProfile, RawDevices).

An object is one kept pull (`adapters/persistence/health_data/raw.py`): its `data` holds
the window of days the pull asked the maker for and every answer the maker gave, as
received, in order. The window of the request selects the pulls whose window meets it.
Reads answer what is kept now: `as_of` is refused (a pull replaces the pulls of the days
it covers; earlier answers are not kept).
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Query
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.date_ranges import EndDate, OptionalStartDate, StartDate, date_range
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.http.summaries import Sport
from healthledger.adapters.http.user_devices import devices_of
from healthledger.adapters.persistence.health_data.raw import StoredPull
from healthledger.domain.connections.summaries import stable_int
from healthledger.domain.errors import InvalidRequest, SummaryNotFound
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(tags=["summaries"], route_class=LedgerRoute)

# The namespace of a kept pull's id (uuid5 of the user, provider, resource and the
# pull's keyed slot): stable while the pull is kept, new when a pull replaces it.
_RAW_NAMESPACE = UUID("2f4d6a8c-1b3e-5f70-9a2c-4e6b8d0f1a3c")
# What a workout's raw object names as its sport: a pull's answers are not one workout.
_OTHER_SPORT = {"id": stable_int("other"), "name": "Other", "slug": "other"}

UserId = Annotated[UUID, Path(description="The user's id.")]
ProviderFilter = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only this provider's pulls (a provider slug).",
        examples=["oura"],
    ),
]


# What the documents show (an Oura pull of two days, as kept).
_SOURCE_EXAMPLE: dict[str, Any] = {
    "name": "Oura",
    "slug": "oura",
    "logo": "https://storage.googleapis.com/vital-assets/oura.png",
}
_RAW_EXAMPLE: dict[str, Any] = {
    "id": "5b0e6f5a-91f4-4a53-8c1e-1d7a0c9b2e44",
    "timestamp": "2026-11-28T00:00:00+00:00",
    "data": {
        "start_date": "2026-11-28",
        "end_date": "2026-11-29",
        "fetched_at": "2026-11-30T06:00:03+00:00",
        "answers": [
            {
                "request": "/v2/usercollection/sleep?start_date=2026-11-28&end_date=2026-11-29",
                "answer": {
                    "data": [{"id": "1f4e9a3c-7b2d-4e8f-a6c5-3d2b1a0f9e87", "day": "2026-11-29"}],
                    "next_token": None,
                },
            }
        ],
    },
    "provider_id": "2026-11-28..2026-11-29",
    "user_id": "0d4c8f5e-2b7a-4c19-8e3d-5f6a7b8c9d01",
    "source_id": 3,
    "priority_id": 3,
    "source": _SOURCE_EXAMPLE,
    "created_at": "2026-11-30T06:00:03+00:00",
    "updated_at": "2026-11-30T06:00:03+00:00",
}
_WORKOUT_EXAMPLE: dict[str, Any] = {
    **_RAW_EXAMPLE,
    "sport_id": 0,
    "sport": {"id": 0, "name": "Other", "slug": "other"},
}


def _examples(example: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": [example]})


class RawSource(BaseModel):
    """The client's ClientFacingProvider."""

    name: str
    slug: str
    logo: str


class RawPullData(BaseModel):
    """A pull's window (the days asked for, inclusive), when it was read, and the maker's
    answers in the order read: each the request (path and query, or a demo device's
    generator and day) and the JSON answered, unchanged."""

    model_config = ConfigDict(extra="allow")
    start_date: date
    end_date: date
    fetched_at: datetime
    answers: list[dict[str, Any]]


class RawObject(BaseModel):
    """The client's SleepV2InDb, ActivityV2InDb, BodyV2InDb (and, with `sport`,
    WorkoutV2InDb; `ProfileInDb`): one kept pull."""

    model_config = ConfigDict(extra="allow")
    id: str
    timestamp: datetime = Field(description="The first instant of the pull's window (UTC).")
    data: RawPullData
    provider_id: str = Field(description="The pull's window, `YYYY-MM-DD..YYYY-MM-DD`.")
    user_id: str
    source_id: int
    priority_id: int
    source: RawSource
    created_at: datetime
    updated_at: datetime


class RawWorkoutObject(RawObject):
    sport_id: int
    sport: Sport


class RawSleep(BaseModel):
    model_config = _examples({"sleep": [_RAW_EXAMPLE]})

    sleep: list[RawObject]


class RawActivity(BaseModel):
    model_config = _examples({"activity": [_RAW_EXAMPLE]})

    activity: list[RawObject]


class RawWorkouts(BaseModel):
    model_config = _examples({"workouts": [_WORKOUT_EXAMPLE]})

    workouts: list[RawWorkoutObject]


class RawBody(BaseModel):
    model_config = _examples({"body": [_RAW_EXAMPLE]})

    body: list[RawObject]


class RawProfile(BaseModel):
    model_config = _examples({"profile": _RAW_EXAMPLE})

    profile: RawObject


class RawDevice(BaseModel):
    """The client's DeviceV2InDb."""

    id: str
    data: dict[str, Any]
    provider_id: str
    user_id: str
    source_id: int
    source: RawSource


class RawDevices(BaseModel):
    model_config = _examples(
        {
            "devices": [
                {
                    "id": "c3a9d2f0-6a4e-5b1d-9f7e-2a8b4c6d0e12",
                    "data": {
                        "device_manufacturer": "Oura",
                        "device_model": "Oura Ring",
                        "source_type": "ring",
                    },
                    "provider_id": "oura",
                    "user_id": "0d4c8f5e-2b7a-4c19-8e3d-5f6a7b8c9d01",
                    "source_id": 3,
                    "source": _SOURCE_EXAMPLE,
                }
            ]
        }
    )

    devices: list[RawDevice]


# resource -> (the answer's key, its model)
LISTS: dict[str, tuple[str, type[BaseModel]]] = {
    "sleep": ("sleep", RawSleep),
    "activity": ("activity", RawActivity),
    "workouts": ("workouts", RawWorkouts),
    "body": ("body", RawBody),
}


def _check_provider(service: Service, provider: str | None) -> None:
    if provider is not None and provider not in service.catalog:
        raise InvalidRequest("Unknown provider slug.", "provider", "query")


def _source(service: Service, provider: str) -> dict[str, str]:
    entry = service.catalog.get(provider)
    name = entry.name if entry is not None else provider
    logo = (entry.logo if entry is not None else None) or ""
    return {"name": name, "slug": provider, "logo": logo}


def _object(service: Service, user_id: UUID, pull: StoredPull) -> dict[str, Any]:
    source_id = stable_int(pull.provider)
    window = f"{pull.first.isoformat()}..{pull.last.isoformat()}"
    place = f"{pull.provider}\x1f{pull.resource}\x1f{pull.slot}"
    found: dict[str, Any] = {
        "id": str(uuid.uuid5(_RAW_NAMESPACE, f"{user_id}\x1f{place}")),
        "timestamp": datetime.combine(pull.first, time(0), UTC),
        "data": {
            "start_date": pull.first,
            "end_date": pull.last,
            "fetched_at": pull.fetched_at,
            "answers": pull.answers,
        },
        "provider_id": window,
        "user_id": str(user_id),
        "source_id": source_id,
        # No source order applies to what a maker answered: the source's own id.
        "priority_id": source_id,
        "source": _source(service, pull.provider),
        "created_at": pull.fetched_at,
        "updated_at": pull.fetched_at,
    }
    if pull.resource == "workouts":
        found["sport_id"] = _OTHER_SPORT["id"]
        found["sport"] = dict(_OTHER_SPORT)
    return found


def _add_list_route(resource: str, key: str, model: type[BaseModel]) -> None:
    def get_raw(
        service: CurrentService,
        user_id: UserId,
        caller: TeamApiCaller,
        start_date: StartDate,
        end_date: EndDate = None,
        provider: ProviderFilter = None,
    ) -> Any:
        _check_provider(service, provider)
        days = date_range(start_date, end_date)
        pulls = service.health_data.raw.pulls(
            caller.team_id, user_id, resource, days.first_day, days.last_day, provider
        )
        return {key: [_object(service, user_id, pull) for pull in pulls]}

    get_raw.__name__ = f"get_{resource}_raw"
    get_raw.__doc__ = (
        f"The maker's own payloads of the user's {resource}, as received: each pull whose "
        "window meets start_date..end_date (by day), across providers or of one."
    )
    router.add_api_route(
        f"/v2/summary/{resource}/{{user_id}}/raw",
        get_raw,
        methods=["GET"],
        response_model=model,
        dependencies=[TEAM_READ_REFUSES_AS_OF],
        responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
    )


for resource, (key, model) in LISTS.items():
    _add_list_route(resource, key, model)


@router.get(
    "/v2/summary/profile/{user_id}/raw",
    response_model=RawProfile,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(
        401,
        404,
        422,
        described={404: USER_NOT_FOUND[404] + " Or no profile pull kept (in the range)."},
    ),
)
def get_profile_raw(
    service: CurrentService,
    user_id: UserId,
    caller: TeamApiCaller,
    provider: ProviderFilter = None,
    start_date: OptionalStartDate = None,
    end_date: EndDate = None,
) -> Any:
    """The maker's own payloads of the user's profile, as received: the newest pull kept
    (whose window meets start_date..end_date when given), as `profile.get_raw` reads it."""
    _check_provider(service, provider)
    if start_date is None:
        if end_date is not None:
            raise InvalidRequest("end_date needs a start_date.", "end_date", "query")
        first, last = date.min, date.max
    else:
        days = date_range(start_date, end_date)
        first, last = days.first_day, days.last_day
    pulls = service.health_data.raw.pulls(caller.team_id, user_id, "profile", first, last, provider)
    if not pulls:
        raise SummaryNotFound("No profile pull kept for this user.")
    newest = max(pulls, key=lambda p: (p.fetched_at, p.last, p.provider))
    return {"profile": _object(service, user_id, newest)}


@router.get(
    "/v2/summary/devices/{user_id}/raw",
    response_model=RawDevices,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
)
def get_devices_raw(
    service: CurrentService,
    user_id: UserId,
    caller: TeamApiCaller,
    provider: ProviderFilter = None,
) -> Any:
    """The user's devices, as `devices.get_raw` reads them: one per connection not
    deregistered. No maker we read sends a device document with the data it serves, so
    `data` is the device as `user.get_devices` describes it, not a maker's payload."""
    _check_provider(service, provider)
    devices = devices_of(service, caller.team_id, user_id)
    return {
        "devices": [
            {
                "id": str(device.id),
                "data": device.model_dump(mode="json"),
                "provider_id": device.provider,
                "user_id": str(user_id),
                "source_id": stable_int(device.provider),
                "source": _source(service, device.provider),
            }
            for device in devices
            if provider is None or device.provider == provider
        ]
    }
