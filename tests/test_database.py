"""The Database's contexts: a unit of work changes where statements run, never which
transaction they belong to."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.schema import pending_erasures
from sqlalchemy import Connection, func, insert, select
from sqlalchemy import exc as sa_exc


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
