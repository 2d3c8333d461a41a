"""Webhook payloads, built when a delivery is sent (gaps.md Webhooks).

A delivery names the event it announces; the payload is rebuilt from that event and the
data it points at, by the deprecation rules in force at the event's own time, so a
redelivery today carries what the first delivery carried. Nothing personal is kept in a
delivery: a user erased since has no client_user_id, no key and no data left, and
`build` answers None (the delivery is dropped, never sent).

Every payload validates against the official client's model for its event type (issue
17, tests/e2e/test_official_client_webhooks.py): daily data events carry the summary object
itself (built by `domain/connections/summaries.py`, as the summary getters' are; a workout or meal
event carries one session) or `{data: [samples], source}` in the client's shapes, and
where the client requires a field the deprecation calendar removes (`is_final`, `source`
in provider.connection.created) the client wins. docs/webhooks.md, "What is announced,
and the payloads", has the details.

Our own lifecycle types (`user.deleted`, `user.deletion_undone`, `user.erased`; no client
model) carry no personal value at all: their envelope's client_user_id is null, and their
data only ids, times, the deletion's request id and what an erasure removed. `user.erased`
is built after the erasure (it is the one message an erased user still gets); a deletion
or an undo not sent by then is dropped, the erasure having superseded it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.answers.appointments import appointment_answer
from healthledger.adapters.answers.orders import OrderAnswers, OrderRow, UsersKey
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import users
from healthledger.adapters.persistence.health_data.blocks import period_of
from healthledger.adapters.persistence.health_data.store import SqlHealthDataStore
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.adapters.persistence.queries.delivery_types import delivery_types
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.health_data import StoredDay
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.connections.sessions import SESSION_RESOURCES, sessions_of
from healthledger.domain.connections.summaries import (
    SUMMARY_OBJECTS,
    DayData,
    DescribeProvider,
    json_default,
    source_context,
    summary_object,
    summary_objects,
)
from healthledger.domain.context import attributed
from healthledger.domain.labs.appointments import Appointment
from healthledger.domain.labs.orders import CRITICAL, Order
from healthledger.domain.ledger import Ledger, ReadsManyStreams
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.announcements import (
    APPOINTMENT_CREATED,
    APPOINTMENT_UPDATED,
    LIFECYCLE_EVENT_TYPES,
    ORDER_CREATED,
    ORDER_UPDATED,
    RESULT_CRITICAL,
)
from healthledger.domain.webhooks.deprecation_calendar import Rules
from healthledger.domain.webhooks.event_destinations import EventDestination
from sqlalchemy import select

RulesAt = Callable[[datetime], Rules]


class Payloads:
    def __init__(
        self,
        db: Database,
        ledger: Ledger,
        key_store: KeyStore,
        health_data: SqlHealthDataStore,
        describe: DescribeProvider,
        rules_at: RulesAt,
        order_answers: OrderAnswers | None = None,
    ) -> None:
        self.db = db
        # Lab test orders' answers (the order, a critical result's notice); None: a
        # service without the lab catalog announces no order.
        self.order_answers = order_answers
        self.ledger = ledger
        self.key_store = key_store
        self.health_data = health_data
        self.describe = describe
        self.rules_at = rules_at
        # A round's users' rows and streams read at once (`preloaded`), per thread.
        self._round = threading.local()

    def event_types(self, rows: Sequence[Any]) -> list[str | None]:
        """The event types of these deliveries' rows (of `webhook_deliveries`), opened
        with their users' keys in one read (ADR 0028); None where the user is erased."""
        with self.db.read() as conn:
            return delivery_types(conn, rows, self.key_store.opener_on)

    def of_delivery(self, row: Any, event_type: str) -> bytes | None:
        """`build` for a delivery's row (of `webhook_deliveries`) and its event type
        (`event_types`): the body it sends."""
        return self.build(
            event_type=event_type,
            user_id=row.user_id,
            team_id=row.team_id,
            source_id=row.source_id,
            source_version=row.source_version,
            day=row.day,
        )

    def build(
        self,
        *,
        event_type: str,
        user_id: UUID | None,
        team_id: UUID,
        source_id: UUID,
        source_version: int,
        day: date | None,
    ) -> bytes | None:
        """The JSON body of the message, or None when the user is gone (erased)."""
        if user_id is None:
            return self._team_level(event_type, team_id, source_id, source_version)
        if event_type in _LIFECYCLE_TYPES:
            return self._lifecycle(event_type, user_id, team_id, source_version)
        _live, sealed = self._users_row(user_id)
        # The row holds the client_user_id sealed with the user's key (ADR 0017): none,
        # or no key to open it, is a user gone (erased).
        opened = None if sealed is None else self.key_store.open(user_id, sealed)
        if opened is None:
            return None
        client_user_id = str(opened)
        if event_type in _APPOINTMENT_TYPES:
            appointment_data = self._appointment(source_id, source_version)
            if appointment_data is None:
                return None
            return _body(event_type, appointment_data, user_id, client_user_id, team_id)
        if event_type in _ORDER_TYPES:
            order_data = self._order(event_type, source_id, source_version)
            if order_data is None:
                return None
            return _body(event_type, order_data, user_id, client_user_id, team_id)
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
        return _body(event_type, data, user_id, client_user_id, team_id)

    def _order(self, event_type: str, order_id: UUID, version: int) -> dict[str, Any] | None:
        """The order as the announced event left it (ClientFacingOrder), or a critical
        result's notice; None once the user's key is gone (erased)."""
        order = self.ledger.find(order_id, version=version)
        if not isinstance(order, Order) or self.order_answers is None:
            return None
        cipher = self.key_store.cipher(order.user_id)
        if cipher is None:
            return None
        # The user's key, unwrapped once for the answer's few sealed values.
        key = UsersKey(cipher)
        row = OrderRow.of(order, key)
        if event_type == RESULT_CRITICAL:
            return self.order_answers.critical(row)
        return self.order_answers.with_vault(key).order(row)

    def _appointment(self, appointment_id: UUID, version: int) -> dict[str, Any] | None:
        """The appointment as the announced event left it (ClientFacingAppointment), its
        order's statuses up to then; None once the user's key is gone (erased)."""
        appointment = self.ledger.find(appointment_id, version=version)
        if not isinstance(appointment, Appointment) or not appointment.history:
            return None
        cipher = self.key_store.cipher(appointment.user_id)
        if cipher is None:
            return None
        then = appointment.history[-1][1]
        order = self.ledger.find(appointment.order_id)
        history = [] if not isinstance(order, Order) else order.history
        return appointment_answer(
            appointment, [(s, at) for s, at in history if at <= then], UsersKey(cipher)
        )

    def is_critical(self, user_id: UUID, sealed_interpretation: str) -> bool:
        """Whether a completion's sealed interpretation is critical (the dispatcher asks,
        to announce `labtest.result.critical`); False once the user's key is gone."""
        return self.key_store.open(user_id, sealed_interpretation) == CRITICAL

    def _team_level(
        self, event_type: str, team_id: UUID, source_id: UUID, version: int
    ) -> bytes | None:
        """A team-level message (no user: `user_id` and `client_user_id` are null), from
        the team's event it announces: an event destination disabled (issue 35)."""
        (event,) = self.ledger.events.get(source_id, gt=version - 1, lte=version)
        (founding,) = self.ledger.events.get(source_id, lte=1)
        if not isinstance(event, EventDestination.Disabled) or not isinstance(
            founding, EventDestination.Created
        ):
            return None  # no other team-level type is announced
        data: dict[str, Any] = {
            "destination_id": str(source_id),
            "team_id": str(team_id),
            "environment": founding.environment,
            "kind": founding.kind,
            "reason": event.reason,
            "failing_since": event.failing_since,
            "disabled_at": attributed(event).timestamp,
            "last_error": event.error,
        }
        return _body(event_type, data, None, None, team_id)

    @contextmanager
    def preloaded(self, rows: Sequence[Any]) -> Iterator[None]:
        """Within it, on this thread, the bodies of these deliveries' rows are built from
        their users' rows read at once, and their users' streams read at once at the
        first lifecycle message (two queries), not two reads per message: a broker's
        round builds hundreds (issue 35); and the stored days that daily data messages
        carry are read once per feed and month (one block opened), not once per message:
        a sync's round announces days of each resource. What was read is what a read per
        message at the first of them would have read."""
        user_ids = list({row.user_id for row in rows if row.user_id is not None})
        wanted: dict[tuple[UUID, date], tuple[date, date]] = {}
        for row in rows:
            if row.user_id is not None and row.day is not None:
                place = (row.source_id, period_of(row.day))
                first, last = wanted.get(place, (row.day, row.day))
                wanted[place] = (min(first, row.day), max(last, row.day))
        found: Sequence[Any] = ()
        many = isinstance(self.ledger.events.recorder, ReadsManyStreams)
        if user_ids and many:
            with self.db.read() as conn:
                found = conn.execute(
                    select(users.c.user_id, users.c.sealed_client_user_id).where(
                        users.c.user_id.in_(user_ids)
                    )
                ).all()
        self._round.preloaded = _Preloaded(
            frozenset(user_ids) if many else frozenset(),
            {r.user_id: r.sealed_client_user_id for r in found},
            wanted,
        )
        try:
            yield
        finally:
            self._round.preloaded = None

    def _users_row(self, user_id: UUID) -> tuple[bool, str | None]:
        """Whether the user has a row (every live user has one; an erased user none), and
        its sealed client_user_id."""
        preloaded: _Preloaded | None = getattr(self._round, "preloaded", None)
        if preloaded is not None and user_id in preloaded.user_ids:
            return user_id in preloaded.rows, preloaded.rows.get(user_id)
        with self.db.read() as conn:
            row = conn.execute(
                select(users.c.sealed_client_user_id).where(users.c.user_id == user_id)
            ).first()
        return (False, None) if row is None else (True, row.sealed_client_user_id)

    def _users_event(self, user_id: UUID, version: int) -> Any:
        """The user's event at `version`."""
        preloaded: _Preloaded | None = getattr(self._round, "preloaded", None)
        if preloaded is not None and user_id in preloaded.user_ids:
            if preloaded.streams is None:
                # A user's stream can be long (its history): read only for a round that
                # announces a lifecycle event, its users' streams in one query.
                recorder = self.ledger.events.recorder
                assert isinstance(recorder, ReadsManyStreams)
                preloaded.streams = recorder.select_streams(list(preloaded.user_ids))
            for stored in preloaded.streams.get(user_id, ()):
                if stored.originator_version == version:
                    return self.ledger.mapper.to_domain_event(stored)
        (event,) = self.ledger.events.get(user_id, gt=version - 1, lte=version)
        return event

    def _lifecycle(
        self, event_type: str, user_id: UUID, team_id: UUID, version: int
    ) -> bytes | None:
        """A lifecycle message, from the user's event it announces."""
        event = self._users_event(user_id, version)
        told = attributed(event)
        if isinstance(event, User.Erased):
            data: dict[str, Any] = {
                "user_id": str(user_id),
                "erased_at": told.timestamp,
                "removed": list(event.removed),
            }
            return _body(event_type, data, user_id, None, team_id)
        if not self._users_row(user_id)[0]:
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
        assert isinstance(event, ResourceFeed.DailySynced) and day is not None
        found = self._stored_day(user_id, stream, day)
        if found is None:
            return None  # erased since (or never stored)
        day_data = DayData(
            user_id=user_id,
            provider=stream.provider,
            resource=stream.resource,
            day=day,
            created_at=found.stored_at,
            updated_at=found.updated_at,
            source=source_context(stream.provider, rules, self.describe),
            ids=found.ids,
        )
        return daily_data(day_data, found.value, event.session)

    def _stored_day(self, user_id: UUID, feed: ResourceFeed, day: date) -> StoredDay | None:
        """The feed's stored day, as it is now; within `preloaded`, the days of the
        round's messages of its month read at once, at the first of them."""
        preloaded: _Preloaded | None = getattr(self._round, "preloaded", None)
        place = (feed.id, period_of(day))
        span = None if preloaded is None else preloaded.wanted.get(place)
        if preloaded is None or span is None or not span[0] <= day <= span[1]:
            return self._stored_days(user_id, feed, (day, day)).get(day)
        days = preloaded.days.get(place)
        if days is None:
            days = preloaded.days[place] = self._stored_days(user_id, feed, span)
        return days.get(day)

    def _stored_days(
        self, user_id: UUID, feed: ResourceFeed, span: tuple[date, date]
    ) -> dict[date, StoredDay]:
        """The feed's stored days of span's first..last, by day."""
        stored = self.health_data.read_range(
            user_id, *span, resources=[feed.resource], provider=feed.provider
        )
        return {found.day: found for found in stored}


@dataclass
class _Preloaded:
    """A round's users (`user_ids`; none when the log cannot read many streams at
    once), the sealed client_user_id of each that has a row (a live one); the first
    and last day of its daily data messages per feed and month (`wanted`); and, once
    read, its users' streams' stored events and the stored days of `wanted`."""

    user_ids: frozenset[UUID]
    rows: dict[UUID, str | None]
    wanted: Mapping[tuple[UUID, date], tuple[date, date]]
    streams: Mapping[UUID, Sequence[Any]] | None = None
    days: dict[tuple[UUID, date], dict[date, StoredDay]] = field(default_factory=dict)


_LIFECYCLE_TYPES = frozenset(LIFECYCLE_EVENT_TYPES.values())
_ORDER_TYPES = frozenset({ORDER_CREATED, ORDER_UPDATED, RESULT_CRITICAL})
_APPOINTMENT_TYPES = frozenset({APPOINTMENT_CREATED, APPOINTMENT_UPDATED})


def _body(
    event_type: str,
    data: dict[str, Any],
    user_id: UUID | None,
    client_user_id: str | None,
    team_id: UUID,
) -> bytes:
    """The envelope (gaps.md Webhooks), compact JSON: the bytes that are signed. A
    team-level type's `user_id` is null."""
    envelope = {
        "event_type": event_type,
        "data": data,
        "user_id": None if user_id is None else str(user_id),
        "client_user_id": client_user_id,
        "team_id": str(team_id),
    }
    return json.dumps(envelope, separators=(",", ":"), default=json_default).encode()


def daily_data(it: DayData, value: Any, session: str | None = None) -> dict[str, Any] | None:
    """The `data` of `daily.data.<resource>.*` (gaps.md Webhooks): the summary object
    itself for summary resources (`domain/connections/summaries.py`, the getters' objects too),
    `{data: [samples], source}` for timeseries ones, each in the shape of the official
    client's model for the resource (see docs/webhooks.md). None when the session it
    announces is no longer stored.

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
    if it.resource not in SESSION_RESOURCES:
        return summary_object(it, value, None)
    if session is not None:
        # One session per event, as the client announces them (issue 17).
        item = sessions_of(it.resource, it.day, value).get(session)
        return None if item is None else summary_object(it, item, session)
    # A sync recorded before sessions announced its whole day: the day's first session
    # as `data`, every session of the day in `sessions` (docs/webhooks.md), as then.
    sessions = summary_objects(it, value)
    if not sessions:
        return {**common, "source": it.source, "sessions": []}
    return {**sessions[0], **common, "sessions": sessions}


def _workout_stream(it: DayData, samples: Any) -> dict[str, Any]:
    # The client's shallow workout stream names the workout; the demo's stream is kept per
    # day, so the day's stream stands for one workout session of that day. The samples stay
    # in `data`, as every timeseries event carries them.
    provider_id = f"{it.day.isoformat()}-workout_stream"
    return {
        "workout_id": str(it.ids.summary(it.provider, "workout_stream", it.day, provider_id)),
        "provider_id": provider_id,
        "data": samples,
        "source": it.source,
    }
