"""Summary objects: the one place that makes a stored day of a summary resource into the
objects the official client reads (docs/data.md).

The summary getters (`GET /v2/summary/<resource>/{user_id}`) and the `daily.data.*`
webhooks (`adapters/webhooks/payloads.py`) both build their objects here, so that a
summary announced by a webhook and the same summary read back are the same object: the
same `id`, fields and source. A daily summary (sleep, activity, body...) is one object a
day; a resource kept as sessions (workouts, meals) is one object per session.

The source context (spec 2.13) is made by the rules of one instant: a webhook's are its
event's time, a getter's the request's. From 2024-07-31 it has no `name`, `logo` and
`slug` (section 9, `domain/webhooks/deprecation_calendar.py`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any
from uuid import UUID

from healthledger.domain.connections.providers import SUMMARY_RESOURCES
from healthledger.domain.connections.sessions import SESSION_RESOURCES, sessions_of
from healthledger.domain.connections.summary_ids import SummaryIds
from healthledger.domain.webhooks.deprecation_calendar import Rules

# slug -> {"name", "slug", "logo"}
DescribeProvider = Callable[[str], dict[str, Any]]

# Resources whose daily data is one summary object (the client's ClientFacing<Resource>
# models) or, for sessions, one object each. Every other resource is a timeseries. Blood
# pressure is stored as a day's readings and the client reads it as a timeseries
# (ClientFacingBloodPressureTimeseries), so it is not here although the pull engine keeps
# it as a summary (domain SUMMARY_RESOURCES).
SUMMARY_OBJECTS = SUMMARY_RESOURCES - {"blood_pressure"}
# Summaries whose client model also requires `source_provider` and `source_type`.
SOURCE_FIELD_RESOURCES = frozenset({"sleep_cycle", "menstrual_cycle", "electrocardiogram"})

# The source context's `type` (spec 2.13: "for example ring, app") per provider: the kind
# of device that records the data, in the client's vocabulary (unknown, phone, watch, app,
# multiple_sources, fingerprick, cuff, manual_scan, automatic, scale, chest_strap, ring,
# lab, exercise_machine, earphone). Ours: the spec gives no table.
UNKNOWN_SOURCE_TYPE = "unknown"
SOURCE_TYPES: dict[str, str] = {
    "oura": "ring",
    "ultrahuman": "ring",
    "fitbit": "watch",
    "garmin": "watch",
    "polar": "watch",
    "whoop": "watch",
    "whoop_v2": "watch",
    "renpho": "scale",
    "peloton": "exercise_machine",
    "wahoo": "exercise_machine",
    "hammerhead": "exercise_machine",
    "omron": "cuff",
    "omron_ble": "cuff",
    "beurer_ble": "cuff",
    "freestyle_libre": "automatic",
    "freestyle_libre_ble": "automatic",
    "abbott_libreview": "automatic",
    "dexcom": "automatic",
    "dexcom_v3": "automatic",
    "tandem_source": "automatic",
    "onetouch_ble": "fingerprick",
    "accuchek_ble": "fingerprick",
    "contour_ble": "fingerprick",
    "apple_health_kit": "multiple_sources",
    "health_connect": "multiple_sources",
    "samsung_health": "multiple_sources",
    "google_fit": "multiple_sources",
    "google_health": "multiple_sources",
    "ihealth": "multiple_sources",
    "beurer_api": "multiple_sources",
    "withings": "multiple_sources",
    "manual": "app",
    "strava": "app",
    "zwift": "app",
    "my_fitness_pal": "app",
    "my_fitness_pal_v2": "app",
    "cronometer": "app",
    "map_my_fitness": "app",
    "runkeeper": "app",
}

# Sleep stages as the client's sleep cycle codes them (-1 unknown, 1 deep, 2 light, 3 rem,
# 4 awake); the demo stores the names.
_STAGE_CODES = {"deep": 1, "light": 2, "rem": 3, "awake": 4}


def source_context(provider: str, rules: Rules, describe: DescribeProvider) -> dict[str, Any]:
    """The source context of spec 2.13: provider, type, app_id (+ the deprecated name,
    logo and slug before their cut-over; the client has them optional)."""
    source: dict[str, Any] = {
        "provider": provider,
        "type": SOURCE_TYPES.get(provider, UNKNOWN_SOURCE_TYPE),
        # Set only for multi-source providers by the app that recorded the data; the
        # demo devices and provider clouds record it themselves.
        "app_id": None,
    }
    if rules.legacy_source_fields:
        source.update(describe(provider))
    return source


@dataclass(frozen=True)
class DayData:
    """Who and what one stored day is of, beside the stored value itself."""

    user_id: UUID
    provider: str
    resource: str
    day: date
    created_at: datetime
    updated_at: datetime
    source: dict[str, Any]
    # The user's summary ids (keyed, or as before for a user whose key predates them).
    ids: SummaryIds


def summary_objects(it: DayData, value: Any) -> list[dict[str, Any]]:
    """The summary objects of a stored day: the day's summary, or each of its sessions."""
    if it.resource in SESSION_RESOURCES:
        return [
            summary_object(it, item, key)
            for key, item in sessions_of(it.resource, it.day, value).items()
        ]
    return [summary_object(it, value, None)] if isinstance(value, Mapping) else []


def summary_object(it: DayData, value: Mapping[str, Any], session: str | None) -> dict[str, Any]:
    """One summary in the official client's shape (ClientFacingSleep, ...Activity,
    ...Workout, ...Body, MealInDb..., ClientFacingProfile, ...SleepCycle), with its id,
    user, day, source and times; `session` names a workout's or meal's session.

    Every object also carries `user_id`, `provider` and `calendar_date` at its top level:
    our receivers (and the mirror) read them whatever the resource."""
    summary = dict(value)
    # A session is named by its key (the provider's id), a daily summary by its day.
    key = it.day.isoformat() if session is None else session
    summary.update(
        {
            "id": str(it.ids.summary(it.provider, it.resource, it.day, key)),
            "user_id": str(it.user_id),
            "provider": it.provider,
            "calendar_date": it.day.isoformat(),
            # The client's `date`: the day's first instant, UTC (the demo's days are UTC).
            "date": datetime.combine(it.day, time(0), UTC),
            "source": own_source(it.source, value),
            "created_at": it.created_at,
            "updated_at": it.updated_at,
        }
    )
    if session is not None:
        summary["provider_id"] = session
    if it.resource == "sleep":
        # The demo's (and most devices') nightly summary is the main sleep of the night.
        summary.setdefault("type", "long_sleep")
    if it.resource in SOURCE_FIELD_RESOURCES:
        summary["source_provider"] = it.provider
        summary["source_type"] = it.source["type"]
    if it.resource == "sleep_cycle":
        # The night's sleep summary has the same day: the cycle points at it.
        summary["sleep_id"] = str(it.ids.summary(it.provider, "sleep", it.day, it.day.isoformat()))
        summary["stage_type"] = [_stage_code(s) for s in summary.get("stage_type", [])]
    if it.resource == "workouts" and isinstance(summary.get("sport"), str):
        # The client's sport is an object; providers give the sport's slug. Its id is ours,
        # stable per slug.
        slug = summary["sport"]
        summary["sport"] = {
            "id": stable_int(f"sport:{slug}"),
            "name": slug.replace("_", " ").capitalize(),
            "slug": slug,
        }
    if it.resource == "meal":
        # Bookkeeping members of the client's meal: ours, stable per provider.
        summary.setdefault("priority_id", 1)
        summary.setdefault("source_id", stable_int(it.provider))
    return summary


def own_source(source: dict[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    """The provider's source context, with the `type` and `app_id` the stored summary
    names itself where it does: a multi-source provider's import knows the device and the
    app that recorded each summary (Apple Health's export: docs/makers/apple_health.md)."""
    own = value.get("source")
    if not isinstance(own, Mapping):
        return source
    return {**source, **{k: own[k] for k in ("type", "app_id") if own.get(k) is not None}}


def stable_int(text: str) -> int:
    """A positive 31-bit integer, the same on every machine (not Python's salted hash)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big") >> 1


def _stage_code(stage: Any) -> int:
    if isinstance(stage, int):
        return stage
    return _STAGE_CODES.get(str(stage), -1)


def json_default(value: Any) -> Any:
    """How summaries and payloads write what JSON has no type for: instants and days in
    ISO 8601 (with the offset), ids as text."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
