"""`Database.rewrite` on PostgreSQL (ADR 0049, ADR 0028): after rows were deleted or
changed whose old values must leave the disk, VACUUM FULL writes the table into new
files, but it copies the old row versions a session older than the change might still
see, and a session of another database of the server counts too. The rewrite waits for
those sessions (up to its bound) before it runs."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from healthledger.adapters.composition import Service
from sqlalchemy import text

from tests.conftest import postgres_database_url
from tests.integration.test_health_facts_sealed import holding, postgres_pages

NEEDLE = b"rewrite-needle-7f3a9c"
PROBE = "rewrite_probe"
HELD_SECONDS = 2.0


def test_a_session_of_another_database_is_waited_for(service: Service) -> None:
    if service.db.is_sqlite:
        pytest.skip("SQLite: secure_delete and a checkpoint, no VACUUM FULL")
    with service.db.write() as conn:
        conn.execute(text(f"CREATE TABLE {PROBE} (id int PRIMARY KEY, body text)"))
        conn.execute(text(f"INSERT INTO {PROBE} VALUES (1, :body)"), {"body": NEEDLE.decode()})
    # A session of another database of the server takes its snapshot before the delete
    # (a report, a backup, another service on the same server) and holds it a while.
    other = sa.create_engine(postgres_database_url("postgres"), poolclass=sa.NullPool)
    holder = other.connect().execution_options(isolation_level="REPEATABLE READ")
    holder.begin()
    holder.execute(text("SELECT count(*) FROM pg_class")).scalar()
    with service.db.write() as conn:
        conn.execute(text(f"DELETE FROM {PROBE}"))

    def release() -> None:
        time.sleep(HELD_SECONDS)
        holder.rollback()
        holder.close()

    releasing = threading.Thread(target=release)
    releasing.start()
    try:
        began = time.monotonic()
        service.db.rewrite(PROBE)
        waited = time.monotonic() - began
    finally:
        releasing.join()
        other.dispose()
    # It waited for that session, then no page of the table or its index holds the row.
    assert waited >= HELD_SECONDS * 0.75, waited
    pages = postgres_pages(service, (PROBE,))
    if pages is None:
        pytest.skip("pageinspect is not installed")
    assert holding(pages, b"rewrite_probe") == []  # the name is in no row: a sane search
    assert holding(pages, NEEDLE) == []
