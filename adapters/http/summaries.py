"""The summary getters (docs/data.md): `GET /v2/summary/<resource>/{user_id}`, in the
production service's shapes (`{sleep: [...]}`, `{activity: [...]}`, `{workouts: [...]}`,
`{body: [...]}`, `{meals: [...]}`, `{sleep_cycle: [...]}`, `{menstrual_cycle: [...]}`,
`{electrocardiogram: [...]}`, and the profile itself), as the official client's
`sleep.get`, `activity.get`... read them.

Each object is built by `domain/connections/summaries.py`, the same code that builds the
`daily.data.*` webhooks' objects, and answered as the webhooks' JSON is written; the
response models below document the shapes (every object also carries the resource's other
fields, and passes unknown ones through).
"""

import json
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.date_ranges import (
    EndDate,
    OptionalStartDate,
    StartDate,
    date_range,
)
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations.source_priorities import summary_order
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.connections.summaries import DayData, json_default, summary_objects
from healthledger.domain.connections.summary_ids import SummaryIds
from healthledger.domain.errors import InvalidRequest, SummaryNotFound
from pydantic import BaseModel, ConfigDict, Field

ProviderFilter = Annotated[
    str | None,
    Query(
        max_length=64, description="Only this provider's data (a provider slug).", examples=["oura"]
    ),
]


def _example(resource: str, provider: str, trim: int | None = None) -> dict[str, Any]:
    """One summary as the getter answers it: a demo device's, through the summary
    builder (so that the example is never out of date with the shape)."""
    user = UUID("0f8b3c52-6a1e-4d7f-9b20-3c5e8a1d2f47")
    demo, now = DemoProvider(), datetime(2026, 3, 20, tzinfo=UTC)
    day = date(2026, 3, 2)  # a Monday: the demo's weekly profile
    while True:
        value = demo.fetch(PullTarget(user, provider, resource, {}), day, day, now, 1).get(day)
        if value:
            break
        day += timedelta(days=1)
    stored = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC)
    it = DayData(
        user_id=user,
        provider=provider,
        resource=resource,
        day=day,
        created_at=stored + timedelta(hours=6),
        updated_at=stored + timedelta(hours=6),
        source={
            "provider": provider,
            "type": "ring" if provider == "oura" else "multiple_sources",
            "app_id": None,
        },
        # The document's example user has no key: the unkeyed ids (ADR 0057).
        ids=SummaryIds(user, None),
    )
    found = json.loads(json.dumps(summary_objects(it, value)[0], default=json_default))
    if trim is not None:  # long per-stage lists, shortened for the document
        found = {k: v[:trim] if isinstance(v, list) else v for k, v in found.items()}
    return dict(found)


class SummarySource(BaseModel):
    """The source context (spec 2.13): the provider's slug, the kind of device, the app."""

    model_config = ConfigDict(extra="allow")
    provider: str
    type: str | None = None
    app_id: str | None = None
    name: str | None = Field(default=None, deprecated=True, description="Before 2024-07-31 only.")
    slug: str | None = Field(default=None, deprecated=True, description="Before 2024-07-31 only.")
    logo: str | None = Field(default=None, deprecated=True, description="Before 2024-07-31 only.")


class Summary(BaseModel):
    """What every summary carries: its id (stable: a webhook announced the same), its
    user, provider, day, source and times."""

    model_config = ConfigDict(extra="allow")
    id: str
    user_id: str
    provider: str
    calendar_date: str
    source: SummarySource
    created_at: datetime
    updated_at: datetime


class SleepSummary(Summary):
    date: datetime
    bedtime_start: datetime
    bedtime_stop: datetime
    type: str
    duration: int = Field(description="Seconds in bed.")
    total: int = Field(description="Seconds asleep.")
    awake: int
    light: int
    rem: int
    deep: int
    efficiency: float | None = None
    score: int | None = None
    hr_lowest: int | None = None
    hr_average: int | None = None
    average_hrv: float | None = Field(default=None, description="RMSSD, ms.")
    respiratory_rate: float | None = None
    temperature_delta: float | None = None


class HeartRateOfDay(BaseModel):
    avg_bpm: float | None = None
    min_bpm: float | None = None
    max_bpm: float | None = None
    resting_bpm: float | None = None
    avg_walking_bpm: float | None = None


class ActivitySummary(Summary):
    date: datetime
    steps: int | None = None
    distance: float | None = Field(default=None, description="Meters.")
    calories_total: float | None = None
    calories_active: float | None = None
    floors_climbed: int | None = None
    low: float | None = None
    medium: float | None = None
    high: float | None = None
    heart_rate: HeartRateOfDay | None = None


class Sport(BaseModel):
    id: int
    name: str
    slug: str


class WorkoutSummary(Summary):
    provider_id: str = Field(description="The session's id at the provider.")
    time_start: datetime
    time_end: datetime
    sport: Sport | None = None
    calories: float | None = None
    average_hr: int | None = None
    max_hr: int | None = None
    distance: float | None = None


class BodySummary(Summary):
    date: datetime
    weight: float | None = None
    fat: float | None = None


class Energy(BaseModel):
    unit: str = "kcal"
    value: float


class Fats(BaseModel):
    model_config = ConfigDict(extra="allow")
    total: float | None = Field(default=None, description="Grams.")


class Macros(BaseModel):
    """Grams."""

    model_config = ConfigDict(extra="allow")
    carbs: float | None = None
    protein: float | None = None
    fats: Fats | None = None


class MealSummary(Summary):
    provider_id: str
    name: str
    timestamp: datetime
    priority_id: int
    source_id: int
    energy: Energy | None = None
    macros: Macros | None = None


class ProfileSummary(Summary):
    model_config = ConfigDict(json_schema_extra={"examples": [_example("profile", "oura")]})
    height: int | None = None


class SleepCycleSummary(Summary):
    sleep_id: str
    session_start: datetime
    session_end: datetime
    stage_start_offset_second: list[int]
    stage_end_offset_second: list[int]
    stage_type: list[int] = Field(description="-1 unknown, 1 deep, 2 light, 3 rem, 4 awake.")
    source_provider: str
    source_type: str


class MenstrualCycleSummary(Summary):
    period_start: str
    source_provider: str
    source_type: str


class ElectrocardiogramSummary(Summary):
    session_start: datetime
    session_end: datetime
    voltage_sample_count: int
    source_provider: str
    source_type: str


def _examples(key: str, resource: str, provider: str, trim: int | None = None) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": [{key: [_example(resource, provider, trim)]}]})


class SleepSummaries(BaseModel):
    model_config = _examples("sleep", "sleep", "oura")
    sleep: list[SleepSummary]


class ActivitySummaries(BaseModel):
    model_config = _examples("activity", "activity", "oura")
    activity: list[ActivitySummary]


class WorkoutSummaries(BaseModel):
    model_config = _examples("workouts", "workouts", "oura")
    workouts: list[WorkoutSummary]


class BodySummaries(BaseModel):
    model_config = _examples("body", "body", "oura")
    body: list[BodySummary]


class MealSummaries(BaseModel):
    model_config = _examples("meals", "meal", "apple_health_kit")
    meals: list[MealSummary]


class SleepCycleSummaries(BaseModel):
    model_config = _examples("sleep_cycle", "sleep_cycle", "oura", trim=3)
    sleep_cycle: list[SleepCycleSummary]


class MenstrualCycleSummaries(BaseModel):
    model_config = _examples("menstrual_cycle", "menstrual_cycle", "apple_health_kit")
    menstrual_cycle: list[MenstrualCycleSummary]


class ElectrocardiogramSummaries(BaseModel):
    model_config = _examples("electrocardiogram", "electrocardiogram", "apple_health_kit")
    electrocardiogram: list[ElectrocardiogramSummary]


# resource -> (the answer's key, its model): the production service's shapes.
LISTS: dict[str, tuple[str, type[BaseModel]]] = {
    "sleep": ("sleep", SleepSummaries),
    "activity": ("activity", ActivitySummaries),
    "workouts": ("workouts", WorkoutSummaries),
    "body": ("body", BodySummaries),
    "meal": ("meals", MealSummaries),
    "sleep_cycle": ("sleep_cycle", SleepCycleSummaries),
    "menstrual_cycle": ("menstrual_cycle", MenstrualCycleSummaries),
    "electrocardiogram": ("electrocardiogram", ElectrocardiogramSummaries),
}
UserId = Annotated[UUID, Path(description="The user's id.")]


def _check_provider(service: Service, provider: str | None) -> None:
    if provider is not None and provider not in service.catalog:
        raise InvalidRequest("Unknown provider slug.", "provider", "query")


router = APIRouter(tags=["summaries"], route_class=LedgerRoute)


def _add_list_route(resource: str, key: str, model: type[BaseModel]) -> None:
    """The getter of one resource's summaries: the same route for each resource of
    LISTS, with its own path, answer model and name (`get_<resource>_summaries`, which
    the OpenAPI document's operation id is made from)."""

    def get_summaries(
        service: CurrentService,
        user_id: UserId,
        caller: TeamApiCaller,
        start_date: StartDate,
        as_of: TeamAsOf,
        end_date: EndDate = None,
        provider: ProviderFilter = None,
    ) -> Any:
        _check_provider(service, provider)
        days = date_range(start_date, end_date)
        # The team's source priorities order a day's providers.
        order = summary_order(service, caller.team_id, resource, provider, as_of)
        found = service.health_data_queries.summaries(
            caller.team_id,
            user_id,
            resource,
            days.first_day,
            days.last_day,
            provider,
            order,
            as_of=as_of,
        )
        return _json({key: found})

    get_summaries.__name__ = f"get_{resource}_summaries"
    get_summaries.__doc__ = (
        f"The user's {resource} summaries from start_date to end_date (by day), "
        "across providers or of one; as they were at `as_of` when given."
    )
    router.add_api_route(
        f"/v2/summary/{resource}/{{user_id}}",
        get_summaries,
        methods=["GET"],
        response_model=model,
        responses=error_responses(401, 404, 422, described=USER_NOT_FOUND),
    )


for resource, (key, model) in LISTS.items():
    _add_list_route(resource, key, model)


@router.get(
    "/v2/summary/profile/{user_id}",
    response_model=ProfileSummary,
    responses=error_responses(
        401,
        404,
        422,
        described={404: USER_NOT_FOUND[404] + " Or no profile stored (in the range)."},
    ),
)
def get_profile(
    service: CurrentService,
    user_id: UserId,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    provider: ProviderFilter = None,
    start_date: OptionalStartDate = None,
    end_date: EndDate = None,
) -> Any:
    """The user's newest profile (in start_date..end_date when given; as of `as_of` when
    given), as the official client's `profile.get` reads it: one object."""
    _check_provider(service, provider)
    if start_date is None:
        if end_date is not None:
            raise InvalidRequest("end_date needs a start_date.", "end_date", "query")
        # The whole history: profiles are few (a device reports one a week at most).
        first, last = date.min, date.max
    else:
        days = date_range(start_date, end_date)
        first, last = days.first_day, days.last_day
    found = service.health_data_queries.summaries(
        caller.team_id, user_id, "profile", first, last, provider, as_of=as_of
    )
    if not found:
        raise SummaryNotFound("No profile stored for this user.")
    return _json(max(found, key=lambda p: (p["calendar_date"], p["updated_at"])))


def _json(value: Any) -> Response:
    # Written as the webhooks write the same objects (adapters/webhooks/payloads.py).
    body = json.dumps(value, separators=(",", ":"), default=json_default).encode()
    return Response(body, media_type="application/json")
