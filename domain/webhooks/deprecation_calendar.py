"""The deprecation calendar: the dated cut-overs of spec 9 (gaps.md, Deprecations and
their dates), what is in force at an instant, and the aggregate that records each cut-over
when this deployment applies it.

The dates themselves are reference data (`adapters/reference/deprecations.json`); this
module knows what each cut-over key means. `rules_from` is pure: a payload builder asks it
with an event's own timestamp, so replaying the log renders every event as it was sent on
its own date. `DeprecationCalendar.CutOverApplied` is the audit fact that the scheduler
acted on a date (late, if the service was down over it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext

# What each cut-over key switches off.
IS_FINAL_REMOVED = "historical_is_final_removed"
SOURCE_LEGACY_FIELDS_REMOVED = "source_name_logo_slug_removed"
CONNECTION_SOURCE_REMOVED = "connection_created_source_removed"
HYPNOGRAM_EVENTS_REMOVED = "hypnogram_timeseries_events_removed"
CUT_OVER_KEYS = (
    IS_FINAL_REMOVED,
    SOURCE_LEGACY_FIELDS_REMOVED,
    CONNECTION_SOURCE_REMOVED,
    HYPNOGRAM_EVENTS_REMOVED,
)

CALENDAR_ID = uuid.uuid5(uuid.UUID("6b1f3e2a-4c5d-5e6f-8a9b-0c1d2e3f4a5b"), "deprecation-calendar")


@dataclass(frozen=True)
class CutOver:
    key: str
    # "Removal on or after" this date: in force from its first instant, 00:00 UTC.
    effective_on: date
    what: str
    before: str
    after: str
    # Event types no longer sent from the date on, each with the type that replaces it.
    withdrawn_event_types: Mapping[str, str] = field(default_factory=dict)

    @property
    def effective_at(self) -> datetime:
        return datetime.combine(self.effective_on, time(0), tzinfo=UTC)

    def in_force_at(self, instant: datetime) -> bool:
        if instant.tzinfo is None:
            raise ValueError("instants are compared in UTC; a naive datetime is ambiguous")
        return instant >= self.effective_at


@dataclass(frozen=True)
class Rules:
    """What a payload holds at one instant. True: the old field is still sent."""

    # `is_final: true` in historical.data.*.created (until 2024-06-30).
    is_final: bool
    # name, logo and slug in every source context (until 2024-07-31).
    legacy_source_fields: bool
    # The duplicate `source` beside `provider` in provider.connection.created (2024-07-31).
    connection_source: bool
    # Event types no longer sent (the hypnogram timeseries events from 2025-01-31).
    withdrawn_event_types: frozenset[str]

    def sends(self, event_type: str) -> bool:
        return event_type not in self.withdrawn_event_types


def rules_from(instant: datetime, calendar: Iterable[CutOver]) -> Rules:
    """The rules in force at `instant` under `calendar` (pure: no clock, no I/O)."""
    applied = [c for c in calendar if c.in_force_at(instant)]
    keys = {c.key for c in applied}
    return Rules(
        is_final=IS_FINAL_REMOVED not in keys,
        legacy_source_fields=SOURCE_LEGACY_FIELDS_REMOVED not in keys,
        connection_source=CONNECTION_SOURCE_REMOVED not in keys,
        withdrawn_event_types=frozenset(t for c in applied for t in c.withdrawn_event_types),
    )


class CutOverNotDue(ValueError):
    pass


class DeprecationCalendar(Audited):
    """One stream for the deployment (a fixed id): which cut-overs were applied, when."""

    TOPIC = "healthledger:DeprecationCalendar"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:DeprecationCalendar.Created.v1"

    class CutOverApplied(Event):
        TOPIC = "healthledger:DeprecationCalendar.CutOverApplied.v1"
        key: str
        effective_on: date
        what: str

        def apply(self, calendar: DeprecationCalendar) -> None:
            calendar.applied = {**calendar.applied, self.key: self.timestamp}

    def __init__(self, *, id: UUID, timestamp: datetime, actor: str, request_id: str) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `start` and
        on every replay."""
        # Per cut-over key, when this deployment applied it.
        self.applied: dict[str, datetime] = {}

    @classmethod
    def start(cls, ctx: CommandContext, now: datetime) -> DeprecationCalendar:
        return cls.new(ctx, now, id=CALENDAR_ID)

    def apply_cut_over(self, ctx: CommandContext, now: datetime, cut_over: CutOver) -> bool:
        """Record the cut-over once its date has come; False if it already was."""
        if cut_over.key in self.applied:
            return False
        if not cut_over.in_force_at(now):
            raise CutOverNotDue(f"{cut_over.key} is not due before {cut_over.effective_on}")
        self.record(
            ctx,
            now,
            self.CutOverApplied,
            key=cut_over.key,
            effective_on=cut_over.effective_on,
            what=cut_over.what,
        )
        return True
