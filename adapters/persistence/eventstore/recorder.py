"""The event recorder: eventsourcing's ApplicationRecorder on our SQLAlchemy database.

In the transaction that stores a command's events it also writes their timestamps (the
time-travel index), their place in the hash chain (`chain.py`, ADR 0015), their
read-model rows, and the erasure effects (`on_record`), so the log and everything
derived from it change together or not at all.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.domain import CanMutateAggregate, DomainEventProtocol
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    Notification,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
)
from healthledger.adapters.persistence.engine.database import Database, LogHead
from healthledger.adapters.persistence.engine.postgres import failed_check
from healthledger.adapters.persistence.engine.schema import snapshots, stored_events, tracking
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    among,
    insert_rows_of,
    run,
)
from healthledger.adapters.persistence.eventstore.chain import (
    CHAIN_COLUMNS,
    HEAD_MOVED,
    ChainWriter,
)
from healthledger.adapters.persistence.eventstore.subscription import PollingSubscription
from sqlalchemy import (
    Connection,
    Select,
    Table,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy import exc as sa_exc


class HeadMoved(Exception):
    """The rows were linked onto a head that was not the chain's (rolled back)."""


@dataclass
class Inserted:
    """A write's event rows: what answers their notification ids (and, once answered,
    the ids), the chain's head they were linked onto and their last position, and the
    head they leave with the writer's change mark (SQLite) then."""

    answer: Callable[[], list[int]]
    linked: tuple[int, int] | None = None
    head: tuple[Hashable | None, tuple[int, bytes]] | None = None
    ids: list[int] = field(default_factory=list)


# An event row's columns.
EVENT_COLUMNS = ("originator_id", "originator_version", "topic", "state", "timestamp")
# The most event rows one INSERT writes (a command writes a few; a fan-out, more).
EVENT_BATCH = 16
# PostgreSQL: after a guessed head that was not the chain's, this many writes read the
# head first (another process is writing too).
GUESS_BACKOFF = 100

OnRecord = Callable[[Connection, Sequence[DomainEventProtocol[Any]]], None]
# Called after a commit with the domain events it stored (none for a tracking-only one).
CommitListener = Callable[[Sequence[DomainEventProtocol[Any]]], None]
# A write's further statements, run in its transaction after its rows were linked onto the
# chain, with the positions they took (the one before the first, the last): a redaction's
# (eventstore/redaction.py, ADR 0028), which names its own record's position.
Effect = Callable[[Connection, tuple[int, int]], None]


@dataclass(frozen=True)
class EventTables:
    """The tables one event-sourced application records in. The service uses the default
    set; another application sharing the database (the webhook receiver's mirror) brings
    its own, with the same columns, so the two logs never mix."""

    events: Table = stored_events
    snapshots: Table = snapshots
    tracking: Table = tracking


LEDGER_TABLES = EventTables()


def event_values(
    stored: Sequence[StoredEvent], domain_events: Sequence[CanMutateAggregate[Any]]
) -> list[tuple[Any, ...]]:
    """Each event's values in `EVENT_COLUMNS` order: its stored form, and its domain
    event's time (the time-travel index)."""
    return [
        (s.originator_id, s.originator_version, s.topic, s.state, d.timestamp)
        for s, d in zip(stored, domain_events, strict=True)
    ]


class LedgerRecorder(ProcessRecorder):
    """Events, notifications and tracking on one table set; effects in the same txn."""

    def __init__(
        self,
        db: Database,
        on_record: OnRecord | None = None,
        tables: EventTables = LEDGER_TABLES,
        *,
        chained: bool = True,
    ) -> None:
        """`chained`: link each row onto the hash chain of the table (ADR 0015). The
        service's log always is; the webhook receiver's mirror log is not (its table has
        no chain columns), and `bench/audit.py` turns it off to measure what it costs."""
        self.db = db
        self.on_record = on_record
        self.tables = tables
        if chained and not set(CHAIN_COLUMNS) <= set(tables.events.c.keys()):
            raise ValueError(f"{tables.events.name} has no chain columns: record it unchained")
        self.chain = ChainWriter(tables.events) if chained else None
        # The columns each event row binds, in order.
        self.columns = EVENT_COLUMNS + CHAIN_COLUMNS if chained else EVENT_COLUMNS
        # The chain's head after this recorder's last commit, with the writer's change
        # mark then (SQLite, where it is set in the writers' turn: `insert_events`; None
        # on PostgreSQL, where it is a guess: `head_guess`).
        self.known_head: tuple[Hashable | None, tuple[int, bytes]] | None = None
        self.head_lock = threading.Lock()
        self.unguessed = 0
        # What each commit of events calls (subscriptions' wakes, commit listeners):
        # replaced whole under the lock, so a commit reads it without one.
        self.listeners_lock = threading.Lock()
        self.listeners: tuple[CommitListener, ...] = ()
        # PostgreSQL: the errors of failed checks, by failure (`on_failed_check`).
        self.check_failures: dict[str, Callable[[], BaseException]] = {}
        events = tables.events
        chain = self.chain
        db.add_log_writer(
            events.name,
            None
            if chain is None
            else LogHead(chain.head_query, lambda rows: chain.head_of(rows)[0]),
        )
        # The ledger's log mark (ADR 0011) for this recorder's table.
        self.change_mark: Callable[..., Hashable | None] = functools.partial(
            db.change_mark, events.name
        )
        # SQLite: a command's events in one INSERT, compiled once per number of rows (up
        # to `EVENT_BATCH`): the service's most written rows (ADR 0014).
        self.insert_batches: dict[int, CompiledStatement] = {}
        # PostgreSQL: likewise, each row's notification id and where it goes (its stream
        # and version, and its place on the chain) returned.
        self.returning = [events.c.notification_id, events.c.originator_id]
        self.returning.append(
            events.c.chain_position if self.chain is not None else events.c.originator_version
        )
        # An exclusive table lock (readers still read) makes notification ids commit in
        # the order they are assigned, so a follower never skips a late id.
        self.lock_statement = f"LOCK TABLE {events.name} IN EXCLUSIVE MODE"

    def on_failed_check(self, failure: str, error: Callable[[], BaseException]) -> None:
        """PostgreSQL: what a write raises when a check that `on_record` sent with its
        statements failed with `failure` (`healthledger_check`, ADR 0025); any other
        failure is a `RuntimeError`."""
        self.check_failures[failure] = error

    # -- writing ------------------------------------------------------------------------

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        aggregate_events: Sequence[CanMutateAggregate[Any]] = (),
        tracking: Tracking | None = None,
        effect: Effect | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        """Store the events (and the tracking record), with their effects; `effect` (a
        chained write only) runs further statements in the same transaction."""
        if len(aggregate_events) != len(stored_events):
            raise ValueError("the ledger passes each stored event's domain event")
        if effect is not None and (self.chain is None or not stored_events):
            raise ValueError("an effect goes with chained events")
        guess = self.head_guess() if stored_events else None
        # SQLite: the head this write leaves is known before the next write of this
        # process begins, and never replaced by an older one. The next write trusts it
        # while the writer's change mark is the same, which no commit of this writer
        # moves: set after the write's lock was let go, another thread's write could link
        # onto the head before it, whose positions are taken (a UNIQUE failure on
        # chain_position, seen with threads writing outside units of work).
        with self.db.writers_turn():
            try:
                try:
                    inserted = self.write(stored_events, aggregate_events, tracking, guess, effect)
                except (sa_exc.IntegrityError, HeadMoved):
                    if guess is None:
                        raise
                    # Another process linked rows onto the chain meanwhile (or a version
                    # conflict, which the write with the head read raises again): once
                    # more, the head read first, and no guess for a while (ADR 0020).
                    with self.head_lock:
                        self.unguessed = GUESS_BACKOFF
                    inserted = self.write(stored_events, aggregate_events, tracking, None, effect)
            except sa_exc.IntegrityError as exc:
                self.known_head = None
                raise IntegrityError(str(exc.orig)) from exc
            except BaseException:
                self.known_head = None
                raise
            if inserted.head is not None:
                self.known_head = inserted.head
        if inserted.linked is not None and not self.db.is_sqlite:
            # What this process knows of the chain's head (the aggregates it saved are
            # current as long as nothing else is linked on: ADR 0020).
            self.db.log_written(self.tables.events.name, *inserted.linked)
        for listener in self.listeners:
            listener(aggregate_events)
        return inserted.ids

    def head_guess(self) -> tuple[int, bytes] | None:
        """PostgreSQL: the head this process's last commit left, to link the next rows
        onto without waiting for the head's answer (the head is read in the same
        message, and the write is done again if it was not that one), unless a guess
        failed lately."""
        if self.chain is None or self.db.is_sqlite:
            return None
        with self.head_lock:
            if self.unguessed > 0:
                self.unguessed -= 1
                return None
            known = self.known_head
        return None if known is None else known[1]

    def write(
        self,
        stored: Sequence[StoredEvent],
        domain_events: Sequence[CanMutateAggregate[Any]],
        tracking: Tracking | None,
        guess: tuple[int, bytes] | None,
        effect: Effect | None = None,
    ) -> Inserted:
        """One write transaction: the events' rows, the tracking record, the effects.
        Batched on PostgreSQL: one round trip, or two when an answer is needed before
        the COMMIT (ADR 0020, ADR 0025)."""
        try:
            with self.db.batched_write() as conn:
                inserted = self.insert_rows(conn, stored, domain_events, guess)
                if effect is not None:
                    assert inserted.linked is not None
                    effect(conn, inserted.linked)
                if tracking is not None:
                    self.record_tracking(conn, tracking)
                if self.on_record is not None and domain_events:
                    self.on_record(conn, domain_events)
        except sa_exc.DBAPIError as exc:
            failure = failed_check(exc)
            if failure is None:
                raise
            if failure == HEAD_MOVED:
                raise HeadMoved() from exc
            found = self.check_failures.get(failure)
            raise (RuntimeError(failure) if found is None else found()) from exc
        # The rows' numbers (on PostgreSQL, answered with the COMMIT).
        inserted.ids = inserted.answer()
        return inserted

    def insert_rows(
        self,
        conn: Connection,
        stored: Sequence[StoredEvent],
        domain_events: Sequence[CanMutateAggregate[Any]],
        guess: tuple[int, bytes] | None = None,
    ) -> Inserted:
        """Insert the events' rows, linked onto the chain's head (on PostgreSQL onto
        `guess`, if given, checked in the same message). What answers their
        notification ids: on PostgreSQL read when called, the INSERT waiting in the
        write's batch until then."""
        if not stored:
            return Inserted(list)
        if not self.db.is_sqlite:
            # First: the head the rows link onto is read under the lock, so writers of
            # several processes take turns on the chain too. It waits: it needs no answer.
            run(conn, self.lock_statement, None).close()
        rows: list[tuple[Any, ...]] = event_values(stored, domain_events)
        linked = head = None
        if self.chain is not None:
            # SQLite: the head this recorder linked its last rows onto is still the head
            # while no other connection has committed since (ADR 0020).
            mark = self.db.write_mark(self.tables.events.name)
            known = self.known_head
            onto = known[1] if known is not None and mark is not None and known[0] == mark else None
            if guess is not None:
                # PostgreSQL: checked under the lock, before the rows, in the same round
                # trip: a failure aborts the transaction (ADR 0025).
                onto = guess
                position, chain_hash = guess
                self.chain.head_is.execute(conn, {"position": position, "hash": chain_hash})
            links = self.chain.links(conn, rows, onto)
            rows = [(*row, *link) for row, link in zip(rows, links, strict=True)]
            linked = (links[0][0] - 1, links[-1][0])
            head = (mark, links[-1])
        if self.db.is_sqlite:
            # One writer holds the database (BEGIN IMMEDIATE): a row's rowid is its
            # notification id, and the rows of one INSERT take consecutive ones (the
            # table is AUTOINCREMENT), the last of which sqlite3 reports.
            ids: list[int] = []
            for start in range(0, len(rows), EVENT_BATCH):
                batch = rows[start : start + EVENT_BATCH]
                # Row after row, each in `self.columns` order.
                values = [value for row in batch for value in row]
                last = self.insert_batch(conn, len(batch)).execute_row(conn, values)
                assert last is not None
                ids.extend(range(last - len(batch) + 1, last + 1))
            return Inserted(lambda: ids, linked, head)
        answers = []
        for start in range(0, len(rows), EVENT_BATCH):
            batch = rows[start : start + EVENT_BATCH]
            named = {
                f"{name}_{number}": value
                for number, row in enumerate(batch)
                for name, value in zip(self.columns, row, strict=True)
            }
            answers.append(self.insert_batch(conn, len(batch)).rows_later(conn, named))
        if linked is not None and self.chain is not None:
            # Chain order is notification order: rows numbered in another order than
            # their places on the chain would break it. Checked with the statements, so
            # a failure is rolled back, never stored (ADR 0025).
            self.chain.in_order.execute(conn, {"first": linked[0] + 1, "last": linked[1]})
        # Each row by its stream and version, or by its place on the chain.
        keys = [(row[0], row[5] if self.chain is not None else row[1]) for row in rows]

        def notification_ids() -> list[int]:
            found = {(oid, key): nid for answer in answers for nid, oid, key in answer()}
            return [found[key] for key in keys]

        return Inserted(notification_ids, linked, head)

    def insert_batch(self, conn: Connection, count: int) -> CompiledStatement:
        """The INSERT of `count` event rows, binding their values row after row, each
        row's in `self.columns` order."""
        statement = self.insert_batches.get(count)
        if statement is None:
            columns = self.columns
            insert_rows = insert_rows_of(self.tables.events, columns, count)
            if self.db.is_sqlite:
                statement = CompiledStatement(insert_rows)
                expected = tuple(f"{name}_{row}" for row in range(count) for name in columns)
                if statement.compiled(conn.dialect).positions != expected:
                    raise RuntimeError("the event INSERT binds its values in another order")
            else:
                statement = CompiledStatement(insert_rows.returning(*self.returning))
            self.insert_batches[count] = statement
        return statement

    def record_tracking(self, conn: Connection, record: Tracking) -> None:
        """Record a follower's position, or raise `IntegrityError` if a position at or
        past it is already recorded (eventsourcing's contract for tracking recorders)."""
        table = self.tables.tracking
        c = table.c
        name, position = record.application_name, record.notification_id
        # The follower's exactly-once guard: a round that read the log from an older
        # position (another process's round committed first) is refused, and so is the
        # same position twice. The position's own row would not catch a lower one: the
        # DELETE below removes the rows under the latest. Concurrent rounds that both
        # pass are as if one committed before the other; the same position twice meets
        # the primary key.
        recorded = (
            select(c.notification_id)
            .where(c.application_name == name, c.notification_id >= position)
            .exists()
        )
        inserted = conn.execute(
            insert(table)
            .from_select(
                [c.application_name, c.notification_id],
                select(
                    literal(name, c.application_name.type),
                    literal(position, c.notification_id.type),
                ).where(~recorded),
            )
            # Whether a row went in: its RETURNING row (the rowcount of an INSERT ...
            # SELECT reads -1 on PostgreSQL).
            .returning(c.notification_id)
        ).first()
        if inserted is None:
            raise IntegrityError(f"{name} has recorded position {position} or a later one")
        # Only the position matters (the maximum): a follower that records a position per
        # round would otherwise grow the table by a row per round, for ever.
        conn.execute(delete(table).where(c.application_name == name, c.notification_id < position))

    def insert_tracking(self, tracking: Tracking) -> None:
        try:
            with self.db.write() as conn:
                self.record_tracking(conn, tracking)
        except sa_exc.IntegrityError as exc:
            raise IntegrityError(str(exc.orig)) from exc

    def max_tracking_id(self, application_name: str) -> int | None:
        with self.db.read() as conn:
            c = self.tables.tracking.c
            found: int | None = conn.execute(
                select(func.max(c.notification_id)).where(c.application_name == application_name)
            ).scalar()
            return found

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

    def select_streams(self, originator_ids: Sequence[UUID]) -> dict[UUID, list[StoredEvent]]:
        """Many aggregates' stored events in one query (the ledger's `find_many`)."""
        return select_streams(self.db, self.tables.events, originator_ids)

    def select_founding(self, originator_ids: Sequence[UUID]) -> dict[UUID, StoredEvent]:
        """Many aggregates' first stored events (version 1) in one query (the ledger's
        `founded_many`)."""
        found: dict[UUID, StoredEvent] = {}
        if not originator_ids:
            return found
        with self.db.read() as conn:
            query = founding_query(self.tables.events, conn.dialect.name == "postgresql")
            rows = conn.execute(query, {"ids": list(originator_ids)}).all()
        for originator_id, version, topic, state in rows:
            found[originator_id] = StoredEvent(
                originator_id=originator_id,
                originator_version=version,
                topic=topic,
                state=bytes(state),
            )
        return found

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
            found: int | None = conn.execute(
                select(func.max(self.tables.events.c.notification_id))
            ).scalar()
            return found

    def count_events(self, after: int = 0, until: Any = None) -> int:
        """The events stored after notification id `after` (and recorded at or before
        `until`): a progress bar's total. Not the last id: ids have gaps (PostgreSQL's
        sequence skips the ids of rolled-back inserts)."""
        c = self.tables.events.c
        query = select(func.count()).select_from(self.tables.events)
        query = query.where(c.notification_id > after)
        if until is not None:
            query = query.where(c.timestamp <= until)
        with self.db.read() as conn:
            return int(conn.execute(query).scalar() or 0)

    def version_at(self, originator_id: UUID, instant: Any) -> int | None:
        """The aggregate's version as of `instant`, from the timestamp index."""
        c = self.tables.events.c
        with self.db.read() as conn:
            found: int | None = conn.execute(
                select(func.max(c.originator_version)).where(
                    c.originator_id == originator_id, c.timestamp <= instant
                )
            ).scalar()
            return found

    # -- following ----------------------------------------------------------------------

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        subscription = PollingSubscription(
            self, gt=gt, topics=topics, on_stop=self.end_subscription
        )
        self.add_commit_listener(subscription.wake)
        return subscription

    def end_subscription(self, subscription: PollingSubscription) -> None:
        self.remove_commit_listener(subscription.wake)

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Call `listener` with the domain events of each commit in this process (a
        wake-up of followers and workers: it must be quick and must not write)."""
        with self.listeners_lock:
            self.listeners = (*self.listeners, listener)

    def remove_commit_listener(self, listener: CommitListener) -> None:
        with self.listeners_lock:
            self.listeners = tuple(known for known in self.listeners if known != listener)


@functools.cache
def stream_query(table: Table, gt: bool, lte: bool, desc: bool, limit: bool) -> Select[Any]:
    """The SELECT of one aggregate's stored events (or snapshots) from `table`, of one
    shape (which bounds it has), built once: aggregates load on every command."""
    c = table.c
    query = select(c.originator_version, c.topic, c.state).where(
        c.originator_id == bindparam("originator_id")
    )
    if gt:
        query = query.where(c.originator_version > bindparam("gt"))
    if lte:
        query = query.where(c.originator_version <= bindparam("lte"))
    query = query.order_by(c.originator_version.desc() if desc else c.originator_version)
    if limit:
        query = query.limit(bindparam("limit"))
    return query


def select_stream(
    db: Database,
    table: Table,
    originator_id: UUID | str,
    gt: int | None,
    lte: int | None,
    desc: bool,
    limit: int | None,
) -> list[StoredEvent]:
    """One aggregate's stored events (or snapshots) from `table`."""
    query = stream_query(table, gt is not None, lte is not None, desc, limit is not None)
    params: dict[str, Any] = {"originator_id": originator_id}
    for name, value in (("gt", gt), ("lte", lte), ("limit", limit)):
        if value is not None:
            params[name] = value
    with db.read() as conn:
        rows = conn.execute(query, params).all()
    return [
        StoredEvent(
            originator_id=originator_id,
            originator_version=version,
            topic=topic,
            state=bytes(state),
        )
        for version, topic, state in rows
    ]


@functools.cache
def streams_query(table: Table, postgres: bool) -> Select[Any]:
    """The SELECT of many aggregates' stored events (or snapshots) from `table`, by a list
    of originator ids, each stream's in version order; built once per kind of database."""
    c = table.c
    return (
        select(c.originator_id, c.originator_version, c.topic, c.state)
        .where(among(c.originator_id, "ids", postgres=postgres))
        .order_by(c.originator_id, c.originator_version)
    )


@functools.cache
def founding_query(table: Table, postgres: bool) -> Select[Any]:
    """The SELECT of many aggregates' first stored events from `table`, by a list of
    originator ids; built once per kind of database."""
    c = table.c
    return select(c.originator_id, c.originator_version, c.topic, c.state).where(
        among(c.originator_id, "ids", postgres=postgres), c.originator_version == 1
    )


def select_streams(
    db: Database, table: Table, originator_ids: Sequence[UUID]
) -> dict[UUID, list[StoredEvent]]:
    """Per originator id of `originator_ids` that has any: its stored events (or
    snapshots) from `table`, in version order."""
    found: dict[UUID, list[StoredEvent]] = {}
    if not originator_ids:
        return found
    with db.read() as conn:
        query = streams_query(table, conn.dialect.name == "postgresql")
        rows = conn.execute(query, {"ids": list(originator_ids)}).all()
    for originator_id, version, topic, state in rows:
        stream = found.get(originator_id)
        if stream is None:
            stream = found[originator_id] = []
        stream.append(
            StoredEvent(
                originator_id=originator_id,
                originator_version=version,
                topic=topic,
                state=bytes(state),
            )
        )
    return found


class SnapshotRecorder(AggregateRecorder):
    """Snapshots in their own table; erasure deletes a user's rows (see erasure policy)."""

    def __init__(self, db: Database, table: Table = snapshots) -> None:
        self.db = db
        self.table = table

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        rows = [
            {
                "originator_id": s.originator_id,
                "originator_version": s.originator_version,
                "topic": s.topic,
                "state": s.state,
            }
            for s in stored_events
        ]
        if not rows:
            # Nothing to record (an INSERT of no rows would be one of default values).
            return None
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

    def select_streams(self, originator_ids: Sequence[UUID]) -> dict[UUID, list[StoredEvent]]:
        """Many aggregates' snapshots in one query (the ledger's `find_many`)."""
        return select_streams(self.db, self.table, originator_ids)
