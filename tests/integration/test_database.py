"""The Database's contexts: a unit of work changes where a thread waits, never which
transaction a statement belongs to; SQLite's writer connection survives being lost; and a
compiled statement stores what SQLAlchemy's own execution stores."""

from __future__ import annotations

import random
import sqlite3
import threading
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import pending_erasures, users
from healthledger.adapters.persistence.engine.statements import CompiledStatement, insert_of
from sqlalchemy import Connection, func, insert, select
from sqlalchemy import exc as sa_exc


def _pending(service: Service) -> int:
    # Always on a reader connection: what other connections see, committed rows only.
    with service.db.reader.connect() as conn:
        return conn.execute(select(func.count()).select_from(pending_erasures)).scalar_one()


def _add_pending(conn: Connection, user_id: uuid.UUID) -> None:
    conn.execute(insert(pending_erasures).values(user_id=user_id, due_at=datetime.now(UTC)))


def _sqlite_only(service: Service) -> None:
    if not service.db.is_sqlite:
        pytest.skip("SQLite's one writer connection")


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
            assert conn.execute(select(pending_erasures.c.user_id)).scalars().all() == [taken]
        with db.unit_of_work(), db.write() as conn:  # a nested unit joins the outer one
            _add_pending(conn, uuid.uuid4())
        assert _pending(service) == 2


def test_a_read_inside_a_write_does_not_see_its_uncommitted_rows(service: Service) -> None:
    db = service.db
    with db.unit_of_work(), db.write() as conn:
        _add_pending(conn, uuid.uuid4())
        with db.read() as reader:
            assert reader.execute(select(func.count()).select_from(pending_erasures)).scalar() == 0


def test_a_unit_of_work_holds_other_threads_writes_back_on_sqlite(service: Service) -> None:
    _sqlite_only(service)
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


def test_sqlite_writes_begin_immediate(service: Service) -> None:
    # A deferred BEGIN would let two processes' writers both read, then fail to upgrade.
    _sqlite_only(service)
    seen: list[str] = []
    with service.db.write() as conn:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
    driver.set_trace_callback(seen.append)
    try:
        with service.db.write() as conn:
            _add_pending(conn, uuid.uuid4())
    finally:
        driver.set_trace_callback(None)
    assert seen[0] == "BEGIN IMMEDIATE" and seen[-1] == "COMMIT"


def test_a_failed_commit_is_sqlalchemys_error_and_leaves_no_transaction(
    service: Service,
) -> None:
    _sqlite_only(service)
    db = service.db
    # A deferred foreign key is checked at COMMIT: the one way to make a COMMIT fail.
    with db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE t_parent (id INTEGER PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE t_child (parent INTEGER REFERENCES t_parent (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(sa_exc.IntegrityError), db.write() as conn:
        conn.exec_driver_sql("INSERT INTO t_child VALUES (1)")
        _add_pending(conn, uuid.uuid4())
    assert db.writer_connection is not None
    writer = db.writer_connection.get()
    assert not writer.in_transaction()
    driver = writer.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection) and not driver.in_transaction
    assert _pending(service) == 0  # rolled back whole
    with db.write() as conn:  # and the writer writes on
        _add_pending(conn, uuid.uuid4())
    assert _pending(service) == 1


def test_an_invalidated_writer_connection_is_replaced(service: Service) -> None:
    _sqlite_only(service)
    db = service.db
    writer = db.writer_connection
    assert writer is not None
    with db.write() as conn:
        _add_pending(conn, uuid.uuid4())
    first = writer.get()
    generation = writer.generation
    first.invalidate()  # as SQLAlchemy does when it finds the connection gone
    with db.write() as conn:
        _add_pending(conn, uuid.uuid4())
    assert writer.get() is not first
    assert writer.generation == generation + 1
    with db.unit_of_work():
        mark = service.recorder.change_mark()
    # A reading of the new connection never equals one of the old.
    assert isinstance(mark, tuple) and mark[0] == generation + 1
    assert _pending(service) == 2


def test_a_compiled_statement_stores_the_row_sqlalchemy_stores(service: Service) -> None:
    # The same values through `conn.execute` (SQLAlchemy's own parameter processing)
    # and through a statement compiled once: the same stored row, byte for byte.
    columns: tuple[str, ...] = ("user_id", "team_id", "sealed_client_user_id", "status")
    columns += ("created_on",)
    columns += ("sealed_fallback_time_zone", "ingestion_start", "ingestion_end", "version")
    compiled = CompiledStatement(insert_of(users, columns))
    rng = random.Random(11)
    team_id = uuid.uuid4()
    rows: list[dict[str, Any]] = []
    for i in range(60):
        zone = timezone(timedelta(minutes=rng.randrange(-720, 720)))
        rows.append(
            {
                "user_id": uuid.uuid4(),
                "team_id": team_id,
                "sealed_client_user_id": f"compiled-{i}",
                "status": "active",
                "created_on": datetime(2000, 1, 1, tzinfo=zone)
                + timedelta(microseconds=rng.randrange(10**16)),
                "sealed_fallback_time_zone": rng.choice([None, "v1.sealed-zone"]),
                "ingestion_start": rng.choice([None, date(2026, 1, 2)]),
                "ingestion_end": rng.choice([None, date(1999, 3, 4)]),
                "version": rng.randrange(1, 9),
            }
        )
    with service.db.write() as conn:
        for row in rows:
            compiled.execute(conn, row)
            twin = {
                **row,
                "user_id": uuid.uuid4(),
                "sealed_client_user_id": row["sealed_client_user_id"] + "+",
            }
            conn.execute(insert(users), twin)
    # What the database holds, compared as text (no result processing in between).
    text = select(*(func.quote(c) for c in users.c)).where(users.c.team_id == team_id)
    if not service.db.is_sqlite:
        text = select(*(c.cast(users.c.sealed_client_user_id.type) for c in users.c)).where(
            users.c.team_id == team_id
        )
    told = [c.name for c in users.c].index("sealed_client_user_id")
    with service.db.read() as conn:
        stored = {r[told]: tuple(r) for r in conn.execute(text)}
    assert len(stored) == 2 * len(rows)
    for row in rows:
        key = row["sealed_client_user_id"]
        ours = stored.get(key) or stored[f"'{key}'"]
        theirs = stored.get(key + "+") or stored[f"'{key}+'"]
        # Every column alike but the two that tell the rows apart.
        alike = [i for i in range(1, len(ours)) if i != told]
        assert [ours[i] for i in alike] == [theirs[i] for i in alike]


def test_a_compiled_statement_joins_the_writes_transaction(service: Service) -> None:
    compiled = CompiledStatement(insert_of(pending_erasures, ("user_id", "due_at")))
    now = datetime.now(UTC)
    with service.db.write() as conn:
        compiled.execute(conn, {"user_id": uuid.uuid4(), "due_at": now})
        _add_pending(conn, uuid.uuid4())
    with pytest.raises(RuntimeError), service.db.write() as conn:
        compiled.execute(conn, {"user_id": uuid.uuid4(), "due_at": now})
        raise RuntimeError("rolled back whole")
    taken = uuid.uuid4()
    with pytest.raises(sa_exc.IntegrityError), service.db.write() as conn:
        compiled.execute(conn, {"user_id": taken, "due_at": now})
        compiled.execute(conn, {"user_id": taken, "due_at": now})  # SQLAlchemy's error
    with service.db.write() as conn:
        compiled.execute_many(conn, [{"user_id": uuid.uuid4(), "due_at": now} for _ in range(3)])
    assert _pending(service) == 5
