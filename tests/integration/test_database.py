"""The Database's contexts: a unit of work changes where statements run, never which
transaction they belong to; and the fast SQLite datetime binding stores the same text."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from eventsourcing.persistence import StoredEvent
from healthledger.adapters.composition import Service
from healthledger.adapters.eventstore.recorder import (
    EVENT_COLUMNS,
    event_rows,
    sqlite_event_values,
)
from healthledger.adapters.persistence.database import SparseInsert, insert_statement
from healthledger.adapters.persistence.schema import (
    UTCDateTime,
    metadata,
    pending_erasures,
    stored_events,
    users,
)
from healthledger.domain.timestamps import iso_text
from sqlalchemy import Connection, TypeDecorator, Uuid, func, insert, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import sqlite


def _pending(service: Service) -> int:
    # Always on a reader connection: what other connections see, committed rows only.
    with service.db.reader.connect() as conn:
        return conn.execute(select(func.count()).select_from(pending_erasures)).scalar_one()


def _add_pending(conn: Connection, user_id: uuid.UUID) -> None:
    conn.execute(insert(pending_erasures).values(user_id=user_id, due_at=datetime.now(UTC)))


def test_each_write_in_a_unit_of_work_commits_on_its_own(service: Service) -> None:
    db = service.db
    taken = uuid.uuid4()
    with db.unit_of_work():
        with db.write() as conn:
            _add_pending(conn, taken)
        assert _pending(service) == 1  # committed before the unit ends
        with pytest.raises(sa_exc.IntegrityError), db.write() as conn:
            _add_pending(conn, uuid.uuid4())
            _add_pending(conn, taken)  # fails: the whole write rolls back, nothing else
        assert _pending(service) == 1
        with db.read() as conn:
            # A read in the unit sees the committed row, and ends its own transaction.
            assert conn.execute(select(pending_erasures.c.user_id)).scalars().all() == [taken]
        assert not (db._writer_conn is not None and db._writer_conn.in_transaction())
        with db.unit_of_work(), db.write() as conn:  # a nested unit joins the outer one
            _add_pending(conn, uuid.uuid4())
        assert _pending(service) == 2


def test_a_read_inside_a_write_does_not_see_its_uncommitted_rows(service: Service) -> None:
    db = service.db
    with db.unit_of_work(), db.write() as conn:
        _add_pending(conn, uuid.uuid4())
        with db.read() as reader:
            assert reader.execute(select(func.count()).select_from(pending_erasures)).scalar() == 0


def test_reads_nest_in_a_unit_of_work(service: Service) -> None:
    db = service.db
    count = select(func.count()).select_from(pending_erasures)
    with db.unit_of_work():
        with db.read() as outer:
            assert outer.execute(count).scalar() == 0  # begins a read transaction
            with db.read() as inner:
                assert inner.execute(count).scalar() == 0
            assert outer.execute(count).scalar() == 0  # still in its own transaction
        with db.write() as conn:  # and the writer is free to write
            _add_pending(conn, uuid.uuid4())
    assert _pending(service) == 1


def test_a_unit_of_work_holds_other_threads_writes_back_on_sqlite(service: Service) -> None:
    if not service.db.is_sqlite:
        pytest.skip("on PostgreSQL a unit of work holds nothing")
    db = service.db
    wrote = threading.Event()

    def write() -> None:
        with db.write() as conn:
            _add_pending(conn, uuid.uuid4())
        wrote.set()

    with db.unit_of_work():
        other = threading.Thread(target=write)
        other.start()
        assert not wrote.wait(0.2)  # it queues on the write lock until the unit ends
    other.join(5)
    assert wrote.is_set() and _pending(service) == 1


def test_sqlite_datetimes_bind_to_the_text_the_generic_path_makes() -> None:
    dialect = sqlite.dialect()
    impl = UTCDateTime().dialect_impl(dialect)
    fast = impl.bind_processor(dialect)
    generic = TypeDecorator.bind_processor(impl, dialect)
    assert fast is not None and generic is not None
    rng = random.Random(7)
    values = [
        datetime(1, 1, 2, tzinfo=UTC),
        datetime(999, 3, 4, 5, 6, 7, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),  # no microseconds: still written out
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
    for _ in range(2000):
        offset = timezone(timedelta(minutes=rng.randrange(-720, 720)))
        start = datetime(2000, 1, 1, tzinfo=offset)
        values.append(start + timedelta(microseconds=rng.randrange(10**16)))
    for value in values:
        assert fast(value) == generic(value)
        # Again, the same object (its text is remembered), and an equal copy of it.
        assert fast(value) == generic(value)
        assert fast(value + timedelta(0)) == generic(value)
    # A UTC datetime whose isoformat the event JSON made last: its text is sliced from
    # that one (microseconds or not, years before 1000 included).
    utc_values = [v.astimezone(UTC) for v in values] + [
        datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC),
        datetime(12, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    ]
    for value in utc_values:
        iso_text(value)
        assert fast(value) == generic(value)
    # Back and forth between two values: each gets its own text.
    first, second = values[-2], values[-1]
    for _ in range(3):
        assert (fast(first), fast(second)) == (generic(first), generic(second))
    assert fast(None) is None
    with pytest.raises(ValueError, match="naive"):
        fast(datetime(2026, 1, 1))


def test_a_failed_commit_is_sqlalchemys_error_and_leaves_no_transaction(
    service: Service,
) -> None:
    if not service.db.is_sqlite:
        pytest.skip("SQLite's writes begin and commit on the driver")
    db = service.db
    # A deferred foreign key is checked at COMMIT: the one way to make a COMMIT fail.
    with db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE t_parent (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE t_child (parent INTEGER REFERENCES t_parent (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(sa_exc.IntegrityError), db.write() as conn:
        driver = conn.connection.driver_connection
        driver.execute("INSERT INTO t_child VALUES (1)")  # type: ignore[union-attr]
        _add_pending(conn, uuid.uuid4())
    writer = db._writer_connection()
    assert not writer.in_transaction()
    assert not writer.connection.driver_connection.in_transaction  # type: ignore[union-attr]
    assert _pending(service) == 0  # rolled back whole
    with db.write() as conn:  # and the writer writes on
        _add_pending(conn, uuid.uuid4())
    assert _pending(service) == 1


def test_event_rows_bind_on_sqlite_as_the_columns_bind_processors_would(
    service: Service,
) -> None:
    if not service.db.is_sqlite:
        pytest.skip("the one-step values are SQLite's")
    prepared = service.db.prepare(
        ("stored_events", "insert"), lambda: insert_statement(stored_events, EVENT_COLUMNS)
    )
    rng = random.Random(11)
    stored, domain = [], []
    for _ in range(200):
        offset = timezone(timedelta(minutes=rng.randrange(-720, 720)))
        stored.append(
            StoredEvent(
                uuid.uuid4(),
                rng.randrange(1, 10**6),
                "healthledger:User.Created",
                rng.randbytes(40),
            )
        )
        at = datetime(2000, 1, 1, tzinfo=offset) + timedelta(microseconds=rng.randrange(10**16))
        domain.append(SimpleNamespace(timestamp=at))
    rows = event_rows(stored, domain)  # type: ignore[arg-type]
    values = sqlite_event_values(stored, domain)  # type: ignore[arg-type]
    assert len(values) == len(rows) == 200
    for row, value in zip(rows, values, strict=True):
        assert value == prepared.params(dict(zip(EVENT_COLUMNS, row, strict=True)))


def test_a_row_binds_as_the_same_values_by_name_would(service: Service) -> None:
    columns = ("user_id", "team_id", "client_user_id", "created_on", "ingestion_start", "version")
    prepared = service.db.prepare(
        ("test", "users.insert"), lambda: insert_statement(users, columns)
    )
    assert tuple(prepared.parameter_names) == columns
    rng = random.Random(3)
    for _ in range(200):
        row = (
            uuid.uuid4(),
            uuid.uuid4(),
            f"id-{rng.random()}",
            datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**16)),
            rng.choice([None, date(2026, 1, rng.randrange(1, 29))]),
            rng.randrange(1, 100),
        )
        assert prepared.row_params(row) == prepared.params(dict(zip(columns, row, strict=True)))
        if service.db.is_sqlite:
            # UUIDs bind as SQLAlchemy's own Uuid processor binds them (its hex).
            dialect = service.db.dialect
            uuid_text = Uuid().dialect_impl(dialect).bind_processor(dialect)
            bound = prepared.row_params(row)
            assert bound[:2] == (uuid_text(row[0]), uuid_text(row[1])) == (row[0].hex, row[1].hex)
            # Datetimes bind as the column type's own processor binds them.
            datetime_text = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
            assert datetime_text is not None and bound[3] == datetime_text(row[3])
    with pytest.raises(ValueError):
        prepared.row_params(row[:-1])


def test_an_invalidated_writer_connection_is_replaced(service: Service) -> None:
    if not service.db.is_sqlite:
        pytest.skip("SQLite's writer keeps one connection")
    db = service.db
    with db.write() as conn:
        _add_pending(conn, uuid.uuid4())
    first = db._writer_connection()
    generation = db._writer_generation
    first.invalidate()  # as SQLAlchemy does when it finds the connection gone
    with db.write() as conn:
        _add_pending(conn, uuid.uuid4())
    assert db._writer_connection() is not first
    assert db._writer_generation == generation + 1
    with db.unit_of_work():
        mark = service.recorder.change_mark()
    assert mark is not None and mark[0] == generation + 1
    assert _pending(service) == 2


def test_a_sqlalchemy_statement_joins_a_write_and_ends_with_it(service: Service) -> None:
    db = service.db
    prepared = db.prepare(
        ("test", "pending.insert"),
        lambda: insert_statement(pending_erasures, ("user_id", "due_at")),
    )
    now = datetime.now(UTC)
    for _ in range(2):
        with db.write() as conn:
            prepared.execute(conn, {"user_id": uuid.uuid4(), "due_at": now})  # on the driver
            _add_pending(conn, uuid.uuid4())  # SQLAlchemy's: joins the same transaction
    with pytest.raises(RuntimeError), db.write() as conn:
        prepared.execute(conn, {"user_id": uuid.uuid4(), "due_at": now})
        _add_pending(conn, uuid.uuid4())
        raise RuntimeError("rolled back whole")
    with db.write() as conn:  # a write with no SQLAlchemy statement after one with
        prepared.execute(conn, {"user_id": uuid.uuid4(), "due_at": now})
    assert _pending(service) == 5
    writer = db._writer_conn
    if writer is not None:
        assert not writer.in_transaction()


def test_a_sparse_insert_stores_the_row_a_full_insert_stores(service: Service) -> None:
    # Its None values are left out of the statement (sqlite3 adapts each None it binds,
    # a costly lookup); the row stored is the one an INSERT of every column stores.
    columns = ("user_id", "team_id", "client_user_id", "status", "created_on")
    columns += ("fallback_time_zone", "ingestion_start", "ingestion_end", "version")
    db = service.db
    sparse = SparseInsert(db, ("test", "users.sparse"), users, columns)
    full = db.prepare(("test", "users.full"), lambda: insert_statement(users, columns))
    rng = random.Random(11)
    team_id = uuid.uuid4()
    rows = []
    for i in range(40):
        rows.append(
            (
                uuid.uuid4(),
                team_id,
                f"sparse-{i}",
                "active",
                datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
                rng.choice([None, "Europe/Berlin"]),
                rng.choice([None, date(2026, 1, 2)]),
                rng.choice([None, date(2026, 3, 4)]),
                rng.randrange(1, 9),
            )
        )
    with db.write() as conn:
        for row in rows:
            sparse.execute_row(conn, row)
            twin = (uuid.uuid4(), *row[1:2], row[2] + "-full", *row[3:])
            full.execute_row(conn, twin)
    with db.read() as conn:
        stored = {
            r.client_user_id: tuple(r)
            for r in conn.execute(select(users).where(users.c.team_id == team_id))
        }
    assert len(stored) == 2 * len(rows)
    for row in rows:
        ours, theirs = stored[row[2]], stored[row[2] + "-full"]
        # Every column alike but the two that tell the rows apart.
        assert ours[1:2] + ours[3:] == theirs[1:2] + theirs[3:]
    with pytest.raises(ValueError, match="values for"), db.write() as conn:
        sparse.execute_row(conn, rows[0][:-1])


def test_a_sparse_insert_refuses_columns_with_a_default(service: Service) -> None:
    with_default = next(
        (table, column)
        for table in metadata.sorted_tables
        for column in table.columns
        if column.default is not None or column.server_default is not None
    )
    table, column = with_default
    with pytest.raises(ValueError, match="default"):
        SparseInsert(service.db, ("test", "defaulted"), table, (column.name,))
