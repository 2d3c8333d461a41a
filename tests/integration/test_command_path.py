"""The command path's statements (ADR 0027): a command's write batched (on PostgreSQL its
statements that need no answer yet wait and go together), reads without a transaction
of their own, a ping only for idle connections, and the aggregates known current on
PostgreSQL by the chain's head.

What a command costs on PostgreSQL is its round trips, so the tests count them (`wire`:
psycopg's hooks on each connection the service checks out) and say which statements go
in each, not how libpq frames them."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine import postgres
from healthledger.adapters.persistence.engine.schema import pending_erasures
from healthledger.adapters.persistence.engine.statements import CompiledStatement, insert_of
from healthledger.adapters.persistence.eventstore.chain import OUT_OF_ORDER
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import UserScheduledForDeletion
from healthledger.domain.users.user import PENDING_ERASURE, User
from psycopg import pq
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from tests.conftest import Team

INSERT_PENDING = CompiledStatement(insert_of(pending_erasures, ("user_id", "due_at")))


def _postgres_only(service: Service) -> None:
    if service.db.is_sqlite:
        pytest.skip("PostgreSQL's statements and connections")


def _pending(service: Service) -> int:
    with service.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(pending_erasures)).scalar_one())


@dataclass
class Wire:
    """What the service sent to PostgreSQL meanwhile: its round trips, each the
    statements that went in it, in order (a statement's SQL as psycopg got it)."""

    round_trips: list[list[str]] = field(default_factory=list)
    # Per connection in a pipeline: the statements queued in it so far.
    piped: dict[int, list[str]] = field(default_factory=dict)

    @property
    def statements(self) -> list[str]:
        return [statement for trip in self.round_trips for statement in trip]

    def sent(self, driver: psycopg.Connection[Any], query: Any, count: int = 1) -> None:
        """`count` runs of `query` (an executemany runs it once per parameter set), as
        psycopg sends them: queued in the connection's pipeline, which is one round trip
        (`pipeline`); else each is one, the BEGIN psycopg sends first outside the
        driver's autocommit another."""
        if isinstance(query, bytes):
            text = query.decode()
        elif isinstance(query, str):
            text = query
        else:
            text = query.as_string(driver)
        text = text.strip()
        begins = not driver.autocommit and driver.info.transaction_status == IDLE
        piped = self.piped.get(id(driver))
        if piped is not None and driver.pgconn.pipeline_status != pq.PipelineStatus.OFF:
            piped.extend([*(["BEGIN"] if begins else []), *[text] * count])
            return
        if begins:
            self.round_trips.append(["BEGIN"])
        # psycopg sends an executemany's runs in one pipeline of its own.
        self.round_trips.append([text] * count)

    @contextmanager
    def pipeline(self, driver: psycopg.Connection[Any], original: Any) -> Iterator[Any]:
        """One of psycopg's pipelines: whatever is queued in it goes in one round trip,
        ended by its Sync."""
        queued: list[str] = []
        self.piped[id(driver)] = queued
        try:
            with original() as pipeline:
                yield pipeline
        finally:
            del self.piped[id(driver)]
            if queued:
                self.round_trips.append(queued)

    def ended(self, driver: psycopg.Connection[Any], statement: str) -> None:
        """psycopg's own COMMIT or ROLLBACK: a round trip if a transaction is open."""
        if not driver.autocommit and driver.info.transaction_status != IDLE:
            self.round_trips.append([statement])


IDLE = pq.TransactionStatus.IDLE


@contextmanager
def wire(service: Service) -> Iterator[Wire]:
    """Count what the service sends to PostgreSQL meanwhile, on every connection it
    checks out: through psycopg's public hooks on each connection, its cursor factory
    (every statement is run on a cursor), its pipelines and its commit and rollback."""
    found = Wire()
    instrumented: list[psycopg.Connection[Any]] = []

    class CountedCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            found.sent(self.connection, query)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params_seq = list(params_seq)
            found.sent(self.connection, query, len(params_seq))
            super().executemany(query, params_seq, **kwargs)

    def checkout(dbapi_conn: Any, *_args: Any) -> None:
        if not isinstance(dbapi_conn, psycopg.Connection) or any(
            conn is dbapi_conn for conn in instrumented
        ):
            return
        original_pipeline, commit, rollback = (
            dbapi_conn.pipeline,
            dbapi_conn.commit,
            dbapi_conn.rollback,
        )

        def counted_commit() -> None:
            found.ended(dbapi_conn, "COMMIT")
            commit()

        def counted_rollback() -> None:
            found.ended(dbapi_conn, "ROLLBACK")
            rollback()

        dbapi_conn.cursor_factory = CountedCursor
        dbapi_conn.pipeline = lambda: found.pipeline(dbapi_conn, original_pipeline)  # type: ignore[method-assign]
        dbapi_conn.commit = counted_commit  # type: ignore[method-assign]
        dbapi_conn.rollback = counted_rollback  # type: ignore[method-assign]
        instrumented.append(dbapi_conn)

    engines = {service.db.writer, service.db.reader}
    for engine in engines:
        sa.event.listen(engine, "checkout", checkout)
    try:
        yield found
    finally:
        for engine in engines:
            sa.event.remove(engine, "checkout", checkout)
        for conn in instrumented:
            conn.cursor_factory = psycopg.Cursor
            for name in ("pipeline", "commit", "rollback"):
                delattr(conn, name)


def test_a_create_is_one_round_trip_and_a_read_one(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    _postgres_only(service)
    service.users.create_user(ctx, team.team_id, client_user_id="warm")
    with wire(service) as sent:
        user = service.users.create_user(ctx, team.team_id, client_user_id="counted")
    # BEGIN, the lock, the check that the chain's head is the one this process left, the
    # events linked onto it, their order's check, the key and its check, the read models
    # and the COMMIT: the checks run on the server, so no answer is needed before the
    # COMMIT (ADR 0027).
    assert len(sent.round_trips) == 1, sent.round_trips
    (trip,) = sent.round_trips
    assert trip[0] == "BEGIN" and trip[-1] == "COMMIT", trip
    write = "\n".join(trip)
    # The values go as parameters, bound on the server: none is quoted into the SQL.
    assert "LOCK TABLE" in write and "%(" in write, write
    assert "chain_position DESC" not in write, write  # the head is checked, not read
    assert write.index("SELECT healthledger_check(") < write.index("INSERT INTO stored_events")
    key = write.index("INSERT INTO user_data_keys")
    assert write.index("SELECT healthledger_check(", key) < write.index("INSERT INTO users")
    assert write.count("SELECT healthledger_check(") == 3, write
    with wire(service) as sent:
        found = service.user_queries.resolved_user(team.team_id, user.id)
    assert found is not None
    # A read is its statements alone, a round trip each: no BEGIN, no ROLLBACK.
    assert sent.round_trips and all(len(trip) == 1 for trip in sent.round_trips)
    assert not {"BEGIN", "ROLLBACK"} & set(sent.statements), sent.round_trips


def test_a_delete_of_a_user_this_process_saved_reads_the_head_not_its_events(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    _postgres_only(service)
    user = service.users.create_user(ctx, team.team_id, client_user_id="known")
    with wire(service) as sent:
        deleted = service.users.delete_user(ctx, team.team_id, user.id)
    assert deleted.status == PENDING_ERASURE
    statements = "\n".join(sent.statements)
    # The user and its claim are known current: no read of their streams (the chain's
    # head is read once, for the unit of work).
    assert "stored_events.originator_version, stored_events.topic" not in statements
    assert statements.count("chain_position DESC") == 1  # the unit's mark
    # Two round trips: the unit's mark with what the deletion ends (its live
    # connections and open orders, one statement), then the whole write, its COMMIT
    # included: its checks go with it (the head it links onto, the rows' order).
    assert len(sent.round_trips) == 2, sent.round_trips
    reads, writes = sent.round_trips
    assert len(reads) == 2, reads
    assert "chain_position DESC" in reads[0] and "UNION ALL" in reads[1], reads
    assert "FROM connections" in reads[1] and "FROM orders" in reads[1], reads
    assert writes[0] == "BEGIN" and writes[-1] == "COMMIT", writes
    assert "\n".join(writes).count("SELECT healthledger_check(") == 2, writes


def test_another_process_commit_makes_the_next_command_read_the_log(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    _postgres_only(service)
    user = service.users.create_user(ctx, team.team_id, client_user_id="elsewhere")
    other = build_service(settings)  # a second process on the same database
    try:
        # It writes nothing about this user, but links rows onto the chain: this
        # process no longer knows every row, and reads the user's stream again.
        other.users.create_user(ctx, team.team_id, client_user_id="unrelated")
        with wire(service) as sent:
            service.users.update_user(
                ctx, team.team_id, user.id, {"fallback_time_zone": "Europe/Paris"}
            )
        statements = "\n".join(sent.statements)
        assert "stored_events.originator_version, stored_events.topic" in statements
        # The unit's mark (with its first read), the stream read again, the write.
        assert len(sent.round_trips) >= 3, sent.round_trips
        other.users.delete_user(ctx, team.team_id, user.id)
    finally:
        other.close()
    with pytest.raises(UserScheduledForDeletion):
        service.users.delete_user(ctx, team.team_id, user.id)


def test_an_error_of_a_waiting_statement_fails_the_commit_and_stores_nothing(
    service: Service,
) -> None:
    user_id = uuid.uuid4()
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with pytest.raises(sa_exc.IntegrityError), service.db.batched_write() as conn:
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
        # The same key again: on PostgreSQL it waits, and fails at the COMMIT.
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
        INSERT_PENDING.execute(conn, {"user_id": uuid.uuid4(), "due_at": due})
    assert _pending(service) == 0
    # The connection is usable again, and an empty batched write stores nothing either.
    with service.db.batched_write():
        pass
    with service.db.batched_write() as conn:
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
    assert _pending(service) == 1


def test_a_failure_found_while_a_long_batch_is_sent_is_raised_as_itself_and_logs_nothing(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    _postgres_only(service)
    user_id = uuid.uuid4()
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with (
        caplog.at_level(logging.WARNING, logger="psycopg"),
        pytest.raises(sa_exc.IntegrityError),
        service.db.batched_write() as conn,
    ):
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
        # Enough after it that psycopg reads the failure while still sending them (the
        # pipeline's end is then aborted, which psycopg would log).
        for _ in range(3000):
            INSERT_PENDING.execute(conn, {"user_id": uuid.uuid4(), "due_at": due})
    assert [r.getMessage() for r in caplog.records] == []
    assert _pending(service) == 0
    with service.db.batched_write() as conn:
        INSERT_PENDING.execute(conn, {"user_id": user_id, "due_at": due})
    assert _pending(service) == 1


def test_a_statement_sqlalchemy_runs_in_a_batched_write_sees_the_writes_before_it(
    service: Service,
) -> None:
    due = datetime(2030, 1, 1, tzinfo=UTC)
    with service.db.batched_write() as conn:
        for _ in range(3):
            INSERT_PENDING.execute(conn, {"user_id": uuid.uuid4(), "due_at": due})
        seen = conn.execute(select(func.count()).select_from(pending_erasures)).scalar_one()
        INSERT_PENDING.execute(conn, {"user_id": uuid.uuid4(), "due_at": due})
    assert seen == 3
    assert _pending(service) == 4


def test_a_connection_closed_by_the_server_while_idle_is_replaced_at_checkout(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    _postgres_only(service)
    with service.db.reader.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    admin = sa.create_engine(service.settings.database_url, poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
    finally:
        admin.dispose()
    # Idle longer than the threshold: pinged at checkout, found closed, replaced.
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE", 0.0)
    with service.db.reader.connect() as conn:
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid


def test_the_chain_stays_whole_when_another_writer_links_rows_between_commands(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    # This process links each write onto the head it left (SQLite: while the writer's
    # change counter says no other connection committed); another process's rows in
    # between must make it read the head again, or the chain would fork.
    other = build_service(settings)
    try:
        for round_ in range(3):
            service.users.create_user(ctx, team.team_id, client_user_id=f"here-{round_}")
            service.users.create_user(ctx, team.team_id, client_user_id=f"again-{round_}")
            other.users.create_user(ctx, team.team_id, client_user_id=f"there-{round_}")
        user = service.users.create_user(ctx, team.team_id, client_user_id="last")
        service.users.delete_user(ctx, team.team_id, user.id)
    finally:
        other.close()
    if not service.db.is_sqlite:
        # PostgreSQL: a write linked onto the head this process left was done again
        # with the head read, and the next ones read it first.
        assert service.recorder.unguessed > 0
    verified = service.chain.verify()
    assert verified.ok, verified.problem
    # Every row of the log is on the chain, once.
    assert verified.records_checked == verified.last_position
    with service.db.read() as conn:
        rows = conn.exec_driver_sql("SELECT count(*) FROM stored_events").scalar_one()
    assert verified.records_checked == rows


def test_commands_of_several_threads_at_once_stay_consistent(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    # On PostgreSQL units of work run side by side: their kept aggregates, their marks,
    # the head each thread's write links onto. Each thread deletes and brings back its own
    # users; every command must land, and the log, the chain and the read model agree.
    users = [
        service.users.create_user(ctx, team.team_id, client_user_id=f"threaded-{i}").id
        for i in range(12)
    ]

    def work(mine: list[uuid.UUID]) -> list[int]:
        versions = []
        for user_id in mine:
            service.users.delete_user(ctx, team.team_id, user_id)
            service.users.undo_deletion(ctx, team.team_id, user_id)
            deleted = service.users.delete_user(ctx, team.team_id, user_id)
            versions.append(deleted.version)
        return versions

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, [users[i::4] for i in range(4)]))
    assert all(version == 4 for versions in results for version in versions)
    for user_id in users:
        with service.db.unit_of_work():
            user = service.ledger.find(user_id)
        assert isinstance(user, User) and user.status == PENDING_ERASURE and user.version == 4
        assert service.user_queries.status(user_id) == PENDING_ERASURE
    verified = service.chain.verify()
    assert verified.ok, verified.problem


def test_a_head_changed_in_place_fails_the_guessed_write_which_reads_the_head_again(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    # The unique index on chain_position catches a head another process moved; only the
    # server-side check catches a head whose hash is not the one this process left (a
    # row changed in place, which only tampering does): the write is done again onto the
    # head as stored, which it reads first.
    _postgres_only(service)
    service.users.create_user(ctx, team.team_id, client_user_id="before")
    with service.db.write() as conn:
        conn.exec_driver_sql(
            "UPDATE stored_events SET chain_hash = decode(repeat('ab', 32), 'hex') "
            "WHERE chain_position = (SELECT max(chain_position) FROM stored_events)"
        )
    with wire(service) as sent:
        service.users.create_user(ctx, team.team_id, client_user_id="after")
    # The guessed write (its check fails, nothing is stored), then the write again with
    # the head read first.
    assert len(sent.round_trips) >= 2, sent.round_trips
    guessed = "\n".join(sent.round_trips[0])
    assert "SELECT healthledger_check(" in guessed and "chain_position DESC" not in guessed
    again = "\n".join(sent.statements[len(sent.round_trips[0]) :])
    assert "chain_position DESC" in again  # read again, after the check failed
    with service.db.read() as conn:
        rows = conn.exec_driver_sql(
            "SELECT chain_position, chain_hash FROM stored_events "
            "ORDER BY chain_position DESC LIMIT 3"
        ).all()
    chain = service.recorder.chain
    assert chain is not None
    tampered = (int(rows[2][0]), bytes(rows[2][1]))
    assert tampered[1] == bytes.fromhex("ab" * 32)
    # The new rows link onto the stored (tampered) hash, not onto the one remembered.
    with service.db.read() as conn:
        stored = conn.exec_driver_sql(
            "SELECT originator_id, originator_version, topic, state, timestamp "
            "FROM stored_events WHERE chain_position > %(p)s ORDER BY chain_position",
            {"p": tampered[0]},
        ).all()
        links = chain.links(conn, [tuple(row) for row in stored], tampered)
    assert [(int(p), bytes(h)) for p, h in reversed(rows[:2])] == links


def test_a_write_check_of_the_rows_order_fails_rows_numbered_out_of_chain_order(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    _postgres_only(service)
    for n in range(2):
        service.users.create_user(ctx, team.team_id, client_user_id=f"ordered-{n}")
    chain = service.recorder.chain
    assert chain is not None
    with service.db.read() as conn:
        last = conn.exec_driver_sql("SELECT max(chain_position) FROM stored_events").scalar_one()
    with service.db.batched_write() as conn:
        chain.in_order.execute(conn, {"first": last - 3, "last": last})
    # Two neighbours' numbers swapped: the check fails, and nothing of its write stays.
    with pytest.raises(sa_exc.DBAPIError) as failed, service.db.batched_write() as conn:
        conn.exec_driver_sql(
            "UPDATE stored_events SET notification_id = -notification_id "
            "WHERE chain_position IN (%(a)s, %(b)s)",
            {"a": last - 1, "b": last},
        )
        chain.in_order.execute(conn, {"first": last - 3, "last": last})
    assert postgres.failed_check(failed.value) == OUT_OF_ORDER
    with service.db.read() as conn:
        negative = conn.exec_driver_sql(
            "SELECT count(*) FROM stored_events WHERE notification_id < 0"
        ).scalar_one()
    assert negative == 0
