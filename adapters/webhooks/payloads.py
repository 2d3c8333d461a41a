"""Webhook payloads, built when a delivery is sent (gaps.md Webhooks).

A delivery names the event it announces; the payload is rebuilt from that event and the
data it points at, by the deprecation rules in force at the event's own time, so a
redelivery today carries what the first delivery carried. Nothing personal is kept in a
delivery: a user erased since has no client_user_id, no key and no data left, and
`build` answers None (the delivery is dropped, never sent).

Every payload validates against the official client's model for its event type (issue
17, tests/e2e/test_official_client_webhooks.py): daily data events carry the summary object
itself or `{data: [samples], source}` in the client's shapes, and where the client requires
a field the deprecation calendar removes (`is_final`, `source` in provider.connection.created)
the client wins. docs/webhooks.md, "What is announced, and the payloads", has the details.

Our own lifecycle types (`user.deleted`, `user.deletion_undone`, `user.erased`; no client
model) carry no personal value at all: their envelope's client_user_id is null, and their
data only ids, times, the deletion's request id and what an erasure removed. `user.erased`
is built after the erasure (it is the one message an erased user still gets); a deletion
or an undo not sent by then is dropped, the erasure having superseded it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.health_data_store import SqlHealthDataStore
from healthledger.adapters.persistence.key_store import KeyStore
from healthledger.adapters.persistence.schema import health_data, users
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.providers import SUMMARY_RESOURCES
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import attributed
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.announcements import LIFECYCLE_EVENT_TYPES
from healthledger.domain.webhooks.deprecation_calendar import Rules
from sqlalchemy import select

# slug -> {"name", "slug", "logo"}
DescribeProvider = Callable[[str], dict[str, Any]]
RulesAt = Callable[[datetime], Rules]

# Resources whose daily event carries one summary object as `data` (the client's
# ClientFacing<Resource> models). Every other resource is a timeseries: `{data: [samples],
# source}`. Blood pressure is stored as a day's readings and the client groups it as a
# timeseries (GroupedBloodPressure), so it is not here although the pull engine keeps it
# as a summary (domain SUMMARY_RESOURCES).
SUMMARY_OBJECTS = SUMMARY_RESOURCES - {"blood_pressure"}
# Summary resources stored as a list of sessions per day.
SESSION_RESOURCES = frozenset({"workouts", "meal"})
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
_SUMMARY_NAMESPACE = uuid.UUID("0d5f0c1e-8a61-5b7e-9c2f-4e3a1b6d7c80")


class Payloads:
    def __init__(
        self,
        db: Database,
        ledger: Ledger,
        key_store: KeyStore,
        health_data: SqlHealthDataStore,
        describe: DescribeProvider,
        rules_at: RulesAt,
    ) -> None:
        self.db = db
        self.ledger = ledger
        self.key_store = key_store
        self.health_data = health_data
        self.describe = describe
        self.rules_at = rules_at

    def build(
        self,
        *,
        event_type: str,
        user_id: UUID,
        team_id: UUID,
        source_id: UUID,
        source_version: int,
        day: date | None,
    ) -> bytes | None:
        """The JSON body of the message, or None when the user is gone (erased)."""
        if event_type in _LIFECYCLE_TYPES:
            return self._lifecycle(event_type, user_id, team_id, source_version)
        with self.db.read() as conn:
            row = conn.execute(
                select(users.c.client_user_id).where(users.c.user_id == user_id)
            ).first()
        if row is None:
            return None
        (stored,) = self.ledger.events.get(source_id, gt=source_version - 1, lte=source_version)
        event = attributed(stored)
        # Who and what a stream is does not change; a pull's range does (a reconnection
        # schedules a new pull), so a pull's completion is read at its own version.
        historical = isinstance(event, ResourceFeed.PullSucceeded)
        stream = self.ledger.find(source_id, version=source_version if historical else None)
        rules = self.rules_at(event.timestamp)
        data = self._data(event_type, event, stream, user_id, day, rules)
        if data is None:
            return None
        return _body(event_type, data, user_id, row.client_user_id, team_id)

    def _lifecycle(
        self, event_type: str, user_id: UUID, team_id: UUID, version: int
    ) -> bytes | None:
        """A lifecycle message, from the user's event it announces."""
        (event,) = self.ledger.events.get(user_id, gt=version - 1, lte=version)
        told = attributed(event)
        if isinstance(event, User.Erased):
            data: dict[str, Any] = {
                "user_id": str(user_id),
                "erased_at": told.timestamp,
                "removed": list(event.removed),
            }
            return _body(event_type, data, user_id, None, team_id)
        with self.db.read() as conn:
            live = conn.execute(select(users.c.user_id).where(users.c.user_id == user_id)).first()
        if live is None:
            return None  # erased since: its user.erased message says all there is
        data = {"user_id": str(user_id), "team_id": str(team_id)}
        if isinstance(event, User.Deleted):
            data.update(deleted_at=told.timestamp, erasure_due_at=event.erasure_due_at)
        else:
            assert isinstance(event, User.DeletionUndone)
            data["undone_at"] = told.timestamp
        data["request_id"] = told.request_id
        return _body(event_type, data, user_id, None, team_id)

    def _data(
        self,
        event_type: str,
        event: Any,
        stream: Any,
        user_id: UUID,
        day: date | None,
        rules: Rules,
    ) -> dict[str, Any] | None:
        if isinstance(event, Connection.Created | Connection.Reconnected):
            provider = self.describe(stream.provider)
            external = None
            if event.sealed_external_user_id is not None:
                external = self.key_store.open(user_id, event.sealed_external_user_id)
                if external is None:
                    return None  # the key is gone: erased
            # `source` is kept after its 2024-07-31 cut-over (rules.connection_source): the
            # official client still requires it, and the spec only allows, never requires,
            # its removal ("on or after"). See docs/webhooks.md, "Client over calendar".
            return {
                "user_id": str(user_id),
                "provider": provider,
                "source": dict(provider),
                "resource_availability": event.resource_availability,
                "external_user_id": external,
            }
        if isinstance(event, Connection.Errored):
            return {
                "provider": stream.provider,
                "user_id": str(user_id),
                "message": event.error_message,
                "error_type": event.error_type,
                # The client requires a string here (gaps.md names no shape): the human
                # detail of the error, as the connection's error_details carries it.
                "error_details": event.error_message,
            }
        assert isinstance(stream, ResourceFeed)
        if isinstance(event, ResourceFeed.PullSucceeded):
            # `is_final: true` is kept after its 2024-06-30 cut-over (rules.is_final) for
            # the same reason as `source` above: the client requires it.
            return {
                "user_id": str(user_id),
                "start_date": stream.range_start,
                "end_date": stream.range_end,
                "provider": stream.provider,
                "is_final": True,
            }
        # Daily data: the day's stored data, as it is now (a later sync may have updated it).
        assert day is not None
        stored = self._stored_day(user_id, stream.provider, stream.resource, day)
        if stored is None:
            return None
        value, stored_at, updated_at = stored
        day_data = DayData(
            user_id=user_id,
            provider=stream.provider,
            resource=stream.resource,
            day=day,
            created_at=stored_at,
            updated_at=updated_at,
            source=self._source(stream.provider, rules),
        )
        return daily_data(day_data, value)

    def _source(self, provider: str, rules: Rules) -> dict[str, Any]:
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
            source.update(self.describe(provider))
        return source

    def _stored_day(
        self, user_id: UUID, provider: str, resource: str, day: date
    ) -> tuple[Any, datetime, datetime] | None:
        """The day's data with when it was first stored and last changed, or None."""
        found = self.health_data.read(user_id, provider, resource, day, day)
        if day not in found:
            return None
        h = health_data.c
        with self.db.read() as conn:
            row = conn.execute(
                select(h.stored_at, h.updated_at).where(
                    h.user_id == user_id,
                    h.provider == provider,
                    h.resource == resource,
                    h.day == day,
                )
            ).first()
        if row is None:
            return None  # erased between the two reads
        return found[day], _utc(row.stored_at), _utc(row.updated_at)


_LIFECYCLE_TYPES = frozenset(LIFECYCLE_EVENT_TYPES.values())


def _body(
    event_type: str,
    data: dict[str, Any],
    user_id: UUID,
    client_user_id: str | None,
    team_id: UUID,
) -> bytes:
    """The envelope (gaps.md Webhooks), compact JSON: the bytes that are signed."""
    envelope = {
        "event_type": event_type,
        "data": data,
        "user_id": str(user_id),
        "client_user_id": client_user_id,
        "team_id": str(team_id),
    }
    return json.dumps(envelope, separators=(",", ":"), default=_json_default).encode()


@dataclass(frozen=True)
class DayData:
    """Who and what one daily data event is of, beside the stored value itself."""

    user_id: UUID
    provider: str
    resource: str
    day: date
    created_at: datetime
    updated_at: datetime
    source: dict[str, Any]


def daily_data(it: DayData, value: Any) -> dict[str, Any]:
    """The `data` of `daily.data.<resource>.*` (gaps.md Webhooks): the summary object
    itself for summary resources, `{data: [samples], source}` for timeseries ones, each in
    the shape of the official client's model for the resource (see docs/webhooks.md).

    Every shape also carries `user_id`, `provider` and `calendar_date` at its top level:
    our receivers (and the mirror) read them whatever the resource."""
    common = {
        "user_id": str(it.user_id),
        "provider": it.provider,
        "calendar_date": it.day.isoformat(),
    }
    if it.resource == "workout_stream":
        return {**common, **_workout_stream(it, value)}
    if it.resource not in SUMMARY_OBJECTS:
        return {**common, "data": value, "source": it.source}
    if it.resource in SESSION_RESOURCES:
        # The client announces one session per event; a delivery here is one per day (its
        # id is keyed by the day), so the event carries the day's first session as `data`
        # and every session of the day in `sessions`. See docs/webhooks.md.
        sessions = [
            _summary(it, item, _session_id(it.resource, it.day, index, item))
            for index, item in enumerate(value)
        ]
        if not sessions:
            return {**common, "source": it.source, "sessions": []}
        return {**sessions[0], **common, "sessions": sessions}
    return {**_summary(it, value, None), **common}


def _summary(it: DayData, value: dict[str, Any], provider_id: str | None) -> dict[str, Any]:
    summary = dict(value)
    # A session is named by its provider id, a daily summary by its day.
    key = it.day.isoformat() if provider_id is None else provider_id
    summary.update(
        {
            "id": str(summary_id(it.user_id, it.provider, it.resource, key)),
            "user_id": str(it.user_id),
            "calendar_date": summary.get("calendar_date", it.day.isoformat()),
            # The client's `date`: the day's first instant, UTC (the demo's days are UTC).
            "date": datetime.combine(it.day, time(0), UTC),
            "source": it.source,
            "created_at": it.created_at,
            "updated_at": it.updated_at,
        }
    )
    if provider_id is not None:
        summary["provider_id"] = provider_id
    if it.resource == "sleep":
        # The demo's (and most devices') nightly summary is the main sleep of the night.
        summary.setdefault("type", "long_sleep")
    if it.resource in SOURCE_FIELD_RESOURCES:
        summary["source_provider"] = it.provider
        summary["source_type"] = it.source["type"]
    if it.resource == "sleep_cycle":
        # The night's sleep summary has the same day: the cycle points at it.
        summary["sleep_id"] = str(summary_id(it.user_id, it.provider, "sleep", it.day.isoformat()))
        summary["stage_type"] = [_stage_code(s) for s in summary.get("stage_type", [])]
    if it.resource == "workouts" and isinstance(summary.get("sport"), str):
        # The client's sport is an object; providers give the sport's slug. Its id is ours,
        # stable per slug.
        slug = summary["sport"]
        summary["sport"] = {
            "id": _stable_int(f"sport:{slug}"),
            "name": slug.replace("_", " ").capitalize(),
            "slug": slug,
        }
    if it.resource == "meal":
        # Bookkeeping members of the client's meal: ours, stable per provider.
        summary.setdefault("priority_id", 1)
        summary.setdefault("source_id", _stable_int(it.provider))
    return summary


def _session_id(resource: str, day: date, index: int, item: dict[str, Any]) -> str:
    """The provider's own id of a session (workouts carry one), or a stable stand-in."""
    own = item.get("id")
    return str(own) if own is not None else f"{day.isoformat()}-{resource}-{index}"


def _workout_stream(it: DayData, samples: Any) -> dict[str, Any]:
    # The client's shallow workout stream names the workout; the demo's stream is kept per
    # day, so the day's stream stands for one workout session of that day. The samples stay
    # in `data`, as every timeseries event carries them.
    provider_id = f"{it.day.isoformat()}-workout_stream"
    return {
        "workout_id": str(summary_id(it.user_id, it.provider, "workout_stream", provider_id)),
        "provider_id": provider_id,
        "data": samples,
        "source": it.source,
    }


def summary_id(user_id: UUID, provider: str, resource: str, key: str) -> UUID:
    """A summary's public id: stable for the same user, provider, resource and day (or
    session), so an `updated` event names the object its `created` event announced."""
    return uuid.uuid5(_SUMMARY_NAMESPACE, f"{user_id}\x1f{provider}\x1f{resource}\x1f{key}")


def _stage_code(stage: Any) -> int:
    if isinstance(stage, int):
        return stage
    return _STAGE_CODES.get(str(stage), -1)


def _stable_int(text: str) -> int:
    # A positive 31-bit integer, the same on every machine (not Python's salted hash).
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big") >> 1


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
