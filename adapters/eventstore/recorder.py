"""The event recorder: eventsourcing's ApplicationRecorder on our SQLAlchemy database.

In the transaction that stores a command's events it also writes their timestamps (the
time-travel index), their read-model rows, and the erasure effects (`on_record`), so
the log and everything derived from it change together or not at all.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from healthledger.adapters.persistence.database import Database, insert_statement
from healthledger.adapters.persistence.schema import (
    snapshots,
    sqlite_datetime_text,
    stored_events,
    tracking,
)
from healthledger.domain.identifiers import uuid_hex
from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select
from sqlalchemy import exc as sa_exc

# An event row's columns, in the order its INSERT binds them.
EVENT_COLUMNS = ("originator_id", "originator_version", "topic", "state", "timestamp")


def event_rows(
    stored_events: Sequence[StoredEvent], domain_events: Sequence[DomainEventProtocol[Any]]
) -> list[tuple[Any, ...]]:
    """Each event's row, in `EVENT_COLUMNS` order."""
    return [
        (s.originator_id, s.originator_version, s.topic, s.state, d.timestamp)
        for s, d in zip(stored_events, domain_events, strict=True)
    ]


def sqlite_event_values(
    stored_events: Sequence[StoredEvent], domain_events: Sequence[DomainEventProtocol[Any]]
) -> list[tuple[Any, ...]]:
    """`event_rows` as sqlite3 binds them: what the columns' bind processors make (a Uuid
    binds as its hex, a UTCDateTime as `sqlite_datetime_text`), in one pass, without
    their generic per-value dispatch. A test holds the two to the same values."""
    return [
        (
            uuid_hex(s.originator_id),
            s.originator_version,
            s.topic,
            s.state,
            sqlite_datetime_text(d.timestamp),
        )
        for s, d in zip(stored_events, domain_events, strict=True)
    ]


OnRecord = Callable[[Connection, Sequence[DomainEventProtocol[Any]]], None]


@dataclass(frozen=True)
class EventTables:
    """The tables one event-sourced application records in. The service uses the default
    set; another application sharing the database (the webhook receiver's mirror) brings
    its own, with the same columns, so the two logs never mix."""

    events: Table = stored_events
    snapshots: Table = snapshots
    tracking: Table = tracking


LEDGER_TABLES = EventTables()


class LedgerRecorder(ProcessRecorder):
    """Events, notifications and tracking on one table set; effects in the same txn."""

    def __init__(
        self, db: Database, on_record: OnRecord | None = None, tables: EventTables = LEDGER_TABLES
    ) -> None:
        self.db = db
        self.on_record = on_record
        self.tables = tables
        self._subscriptions: set[PollingSubscription] = set()
        self._subscriptions_lock = threading.Lock()
        self._commit_listeners: list[Callable[[], None]] = []
        # What `insert_events` calls after each commit (`_update_wakers`).
        self._wakers: tuple[Callable[[], None], ...] = ()
        events = tables.events
        db.add_log_writer(events.name)
        # The ledger's `LogMark` (see `Database.change_mark`), bound here: called on
        # every save, a method in between would be one more Python frame.
        self.change_mark: Callable[..., tuple[int, int] | None] = functools.partial(
            db.change_mark, events.name
        )
        self._insert = db.prepare(
            (events.name, "insert"), lambda: insert_statement(events, EVENT_COLUMNS)
        )
        if db.is_sqlite and tuple(self._insert.parameter_order or ()) != EVENT_COLUMNS:
            raise RuntimeError("the event INSERT binds its columns in another order")
        self._insert_returning = db.prepare(
            (events.name, "insert.returning"),
            lambda: insert_statement(events, EVENT_COLUMNS).returning(events.c.notification_id),
        )

    # -- writing ------------------------------------------------------------------------

    def insert_events(
        self,
        stored_events_: Sequence[StoredEvent],
        *,
        aggregate_events: Sequence[DomainEventProtocol[Any]] = (),
        tracking: Tracking | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        domain_events = aggregate_events
        if len(domain_events) != len(stored_events_):
            raise ValueError("the ledger passes each stored event's domain event")
        try:
            with self.db.write() as conn:
                ids = self._insert_rows(conn, stored_events_, domain_events)
                if tracking is not None:
                    self._insert_tracking(conn, tracking)
                if self.on_record is not None and domain_events:
                    self.on_record(conn, domain_events)
        except sa_exc.IntegrityError as exc:
            raise IntegrityError(str(exc.orig)) from exc
        # Wake the subscriptions and commit listeners (the tuple is replaced whole under
        # the lock, so every commit reads it without one).
        for wake in self._wakers:
            wake()
        return ids

    def _insert_rows(
        self,
        conn: Connection,
        stored_events_: Sequence[StoredEvent],
        domain_events: Sequence[DomainEventProtocol[Any]],
    ) -> list[int]:
        if not stored_events_:
            return []
        if self.db.is_sqlite:
            # One writer holds the database (BEGIN IMMEDIATE): a row's rowid is its
            # notification id, and they are taken in order. These are the service's most
            # written rows: their values are made in one step (`sqlite_event_values`).
            return self._insert.insert_each(
                conn, sqlite_event_values(stored_events_, domain_events)
            )
        # PostgreSQL: an exclusive table lock (readers still read) makes notification ids
        # commit in the order they are assigned, so a follower never skips a late id.
        lock = f"LOCK TABLE {self.tables.events.name} IN EXCLUSIVE MODE"
        conn.exec_driver_sql(lock)
        ids = []
        for row in event_rows(stored_events_, domain_events):
            cursor = self._insert_returning.execute(
                conn, dict(zip(EVENT_COLUMNS, row, strict=True))
            )
            ids.append(cursor.fetchone()[0])
        return ids

    def _insert_tracking(self, conn: Connection, record: Tracking) -> None:
        table = self.tables.tracking
        conn.execute(
            insert(table).values(
                application_name=record.application_name,
                notification_id=record.notification_id,
            )
        )
        # Only the position matters (the maximum): a follower that records a position per
        # round would otherwise grow the table by a row per round, for ever. The
        # follower's exactly-once guard is the insert above (and its own records' ids).
        conn.execute(
            delete(table).where(
                table.c.application_name == record.application_name,
                table.c.notification_id < record.notification_id,
            )
        )

    def insert_tracking(self, tracking: Tracking) -> None:
        with self.db.write() as conn:
            self._insert_tracking(conn, tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        with self.db.read() as conn:
            c = self.tables.tracking.c
            return conn.execute(
                select(func.max(c.notification_id)).where(c.application_name == application_name)
            ).scalar()

    # -- reading ------------------------------------------------------------------------

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return select_stream(self.db, self.tables.events, originator_id, gt, lte, desc, limit)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        c = self.tables.events.c
        query = select(c.notification_id, c.originator_id, c.originator_version, c.topic, c.state)
        if start is not None:
            query = query.where(
                c.notification_id >= start if inclusive_of_start else c.notification_id > start
            )
        if stop is not None:
            query = query.where(c.notification_id <= stop)
        if topics:
            query = query.where(c.topic.in_(topics))
        query = query.order_by(c.notification_id).limit(limit)
        with self.db.read() as conn:
            return [
                Notification(
                    id=row.notification_id,
                    originator_id=row.originator_id,
                    originator_version=row.originator_version,
                    topic=row.topic,
                    state=bytes(row.state),
                )
                for row in conn.execute(query)
            ]

    def max_notification_id(self) -> int | None:
        with self.db.read() as conn:
            return conn.execute(select(func.max(self.tables.events.c.notification_id))).scalar()

    def version_at(self, originator_id: UUID, instant: Any) -> int | None:
        """The aggregate's version as of `instant`, from the timestamp index."""
        c = self.tables.events.c
        with self.db.read() as conn:
            return conn.execute(
                select(func.max(c.originator_version)).where(
                    c.originator_id == originator_id, c.timestamp <= instant
                )
            ).scalar()

    # -- following ----------------------------------------------------------------------

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return PollingSubscription(self, gt=gt, topics=topics)

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` after each commit of events in this process (a wake-up: it must
        be quick and must not write)."""
        with self._subscriptions_lock:
            self._commit_listeners.append(listener)
            self._update_wakers()

    def _register(self, subscription: PollingSubscription) -> None:
        with self._subscriptions_lock:
            self._subscriptions.add(subscription)
            self._update_wakers()

    def _unregister(self, subscription: PollingSubscription) -> None:
        with self._subscriptions_lock:
            self._subscriptions.discard(subscription)
            self._update_wakers()

    def _update_wakers(self) -> None:
        # Under the lock: what a commit calls, subscriptions first.
        self._wakers = (
            *(subscription.wake for subscription in self._subscriptions),
            *self._commit_listeners,
        )


def select_stream(
    db: Database,
    table: Table,
    originator_id: UUID | str,
    gt: int | None,
    lte: int | None,
    desc: bool,
    limit: int | None,
) -> list[StoredEvent]:
    """One aggregate's stored events (or snapshots) from `table`, through a statement
    compiled once per shape: aggregates load on every command, so this is a hot path."""

    def build() -> Any:
        c = table.c
        query = select(c.originator_version, c.topic, c.state).where(
            c.originator_id == bindparam("originator_id")
        )
        if gt is not None:
            query = query.where(c.originator_version > bindparam("gt"))
        if lte is not None:
            query = query.where(c.originator_version <= bindparam("lte"))
        query = query.order_by(c.originator_version.desc() if desc else c.originator_version)
        if limit is not None:
            query = query.limit(bindparam("limit"))
        return query

    key = (table.name, gt is not None, lte is not None, desc, limit is not None)
    params: dict[str, Any] = {"originator_id": originator_id}
    for name, value in (("gt", gt), ("lte", lte), ("limit", limit)):
        if value is not None:
            params[name] = value
    with db.read() as conn:
        rows = db.prepare(key, build).execute(conn, params).fetchall()
    return [
        StoredEvent(
            originator_id=originator_id,
            originator_version=version,
            topic=topic,
            state=bytes(state),
        )
        for version, topic, state in rows
    ]


class PollingSubscription(ListenNotifySubscription[LedgerRecorder]):
    """Woken at once by this process's own writes, and by a poll for other processes."""

    def __init__(
        self,
        recorder: LedgerRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        poll_interval: float = 0.5,
    ) -> None:
        self._poll_interval = poll_interval
        self._poll_stop = threading.Event()
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        recorder._register(self)
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def wake(self) -> None:
        self._has_been_notified.set()

    def _poll(self) -> None:
        while not self._poll_stop.wait(self._poll_interval):
            self.wake()

    def stop(self) -> None:
        self._poll_stop.set()
        self._recorder._unregister(self)
        super().stop()


class SnapshotRecorder(AggregateRecorder):
    """Snapshots in their own table; erasure deletes a user's rows (see erasure policy)."""

    def __init__(self, db: Database, table: Table = snapshots) -> None:
        self.db = db
        self.table = table

    def insert_events(self, stored_events_: Sequence[StoredEvent], **kwargs: Any) -> None:
        rows = [
            {
                "originator_id": s.originator_id,
                "originator_version": s.originator_version,
                "topic": s.topic,
                "state": s.state,
            }
            for s in stored_events_
        ]
        try:
            with self.db.write() as conn:
                conn.execute(insert(self.table), rows)
        except sa_exc.IntegrityError as exc:
            raise IntegrityError(str(exc.orig)) from exc

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return select_stream(self.db, self.table, originator_id, gt, lte, desc, limit)


def delete_snapshots(conn: Connection, originator_id: UUID) -> None:
    conn.execute(delete(snapshots).where(snapshots.c.originator_id == originator_id))


class LedgerInfrastructure(InfrastructureFactory[TrackingRecorder]):
    """Hands the ledger our recorders instead of eventsourcing's own persistence modules."""

    def __init__(self, recorder: LedgerRecorder, snapshot_recorder: SnapshotRecorder) -> None:
        super().__init__(env={})
        self.recorder = recorder
        self.snapshot_recorder = snapshot_recorder

    def is_snapshotting_enabled(self) -> bool:
        return True

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return self.snapshot_recorder if purpose == "snapshots" else self.recorder

    def application_recorder(self) -> ApplicationRecorder:
        return self.recorder

    def tracking_recorder(
        self, tracking_recorder_class: type[TrackingRecorder] | None = None
    ) -> TrackingRecorder:
        return self.recorder

    def process_recorder(self) -> ProcessRecorder:
        return self.recorder
