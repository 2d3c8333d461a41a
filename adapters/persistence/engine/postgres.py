"""PostgreSQL specifics: the engine, reads without a transaction, a ping only for idle
connections, and the batched write transaction a command records its events in.

On PostgreSQL a command's cost is its statements: each one psycopg sends is a message,
a wake-up of the server, a wait for its answer and psycopg's own work around it (about
35 µs of this process's CPU on this machine, more than the statement's work), and
psycopg begins a transaction with a BEGIN of its own (ADR 0020). So:

- **Reads** (`Database.read()`) run in the driver's autocommit: one statement each, no
  BEGIN and ROLLBACK around it. Under READ COMMITTED, PostgreSQL's default and the
  service's, every statement of a read transaction takes its own snapshot anyway; row
  locks (`FOR UPDATE`, `FOR SHARE`) are taken in writes only.
- **The pool pings** a connection at checkout only when it has been idle for
  `PING_AFTER_IDLE` seconds (SQLAlchemy's pessimistic-disconnect recipe: a
  `DisconnectionError` raised at checkout makes the pool connect anew), instead of
  `pool_pre_ping`'s round trip at every checkout. A connection lost while in use fails
  its statement, and SQLAlchemy then invalidates the pool's older connections.
- **A batched write** (the `BATCHED` execution option: `Database.batched_write()`)
  sends its statements together: the ones that need no answer now (BEGIN, the LOCK, the
  read-model writes compiled once, the COMMIT) wait in a `StatementBatch` and go, in
  order, in one psycopg pipeline with the next statement whose answer is read (ADR
  0025): each is parsed and bound on the server with its values as parameters (psycopg
  prepares a statement once it has run a few times on a connection), and one Sync ends
  them. A command's transaction is one round trip: its checks run on the server with
  its statements (`healthledger_check`, revision 0014), and only a statement whose
  answer is read before the COMMIT makes a second one. It stays
  SQLAlchemy's transaction: the connection is in the driver's autocommit, so psycopg
  sends no BEGIN of its own, and the `begin` event queues one (as `sqlite.py`'s begin
  event emits SQLite's); the `commit` event sends what waits with a COMMIT (an error of
  any of them is raised as SQLAlchemy's, and nothing is committed: PostgreSQL skips the
  rest of a pipeline after a statement that failed, up to its Sync, and the transaction
  is rolled back); the `rollback` event drops what waits, unsent. A statement
  SQLAlchemy executes there (Core) sends what waits before it, so it runs after them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from healthledger.adapters.persistence.engine.statements import BATCH
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import ConnectionPoolEntry

# Execution option of a connection whose write transaction is batched.
BATCHED = "healthledger_batched"
# A connection idle this long is pinged before it is handed out.
PING_AFTER_IDLE = 5.0
_CHECKED_IN_AT = "healthledger_checked_in_at"


class Waiting:
    """A statement of a batch, as the cursor its sender reads: its rows once the batch
    is sent (`fetchall` sends it if it is not yet). A sender that closes it before the
    batch is sent wants no answer: the statement then shares the batch's cursor."""

    def __init__(self, batch: StatementBatch) -> None:
        self.batch = batch
        self.wanted = True
        self.result: list[tuple[Any, ...]] | None = None

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self.result is None:
            self.batch.send()
        assert self.result is not None, "a sent batch answers each of its statements"
        return self.result

    def close(self) -> None:
        if self.result is None:
            self.wanted = False


class StatementBatch:
    """The statements of a batched write waiting to be sent (see the module's doc)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        # Each waiting statement: its SQL, its parameters (None: none), whether it runs
        # once per set of them, and what answers its sender.
        self.waiting: list[tuple[str, Any, bool, Waiting | None]] = []
        # Whether anything was sent yet (the BEGIN goes with the first message).
        self.sent = False

    def add(self, sql: str, params: Any, *, many: bool = False) -> Waiting:
        """Queue `sql` (with `params`; with `many`, once per set of them)."""
        waiting = Waiting(self)
        self.waiting.append((sql, params, many, waiting))
        return waiting

    def send(self, then: str | None = None) -> None:
        """Send every waiting statement (and `then`, a statement without parameters) in
        one pipeline: psycopg sends them all, then one Sync, and reads their answers
        back; each sender's rows are then in its `Waiting`."""
        waiting, self.waiting = self.waiting, []
        self.sent = True
        if then is not None:
            waiting.append((then, None, False, None))
        if not waiting:
            return
        driver = self.conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        error = self.conn.dialect.loaded_dbapi.Error
        # A statement whose answer is wanted has a cursor of its own (a psycopg cursor
        # keeps the result of its last statement only); the others share one.
        shared = driver.cursor()
        answered: list[tuple[psycopg.Cursor[Any], Waiting]] = []

        def queue() -> None:
            for sql, params, many, answer in waiting:
                cursor = shared
                if answer is not None:
                    if answer.wanted:
                        cursor = driver.cursor()
                        answered.append((cursor, answer))
                    else:
                        answer.result = []
                if many:
                    cursor.executemany(sql, params)
                else:
                    cursor.execute(sql, params)

        try:
            in_pipeline(driver, queue)
            for cursor, answer in answered:
                answer.result = cursor.fetchall() if cursor.description is not None else []
        except error as exc:
            statements = ";\n".join(sql for sql, *_ in waiting)
            raise sa_exc.DBAPIError.instance(statements, None, exc, error) from exc
        finally:
            shared.close()
            for cursor, _ in answered:
                cursor.close()


def in_pipeline(driver: psycopg.Connection[Any], queue: Callable[[], None]) -> None:
    """Run `queue` (statements executed on `driver`'s cursors) in one pipeline, and read
    their answers. A failed statement is raised as its own error, once: psycopg may find
    it while the statements are still being queued, and would then log the pipeline's
    end (aborted) as an error it ignored, and raise that end instead if it were caught."""
    failed: psycopg.Error | None = None
    try:
        with driver.pipeline():
            try:
                queue()
            except psycopg.Error as exc:
                failed = exc  # the pipeline's end then reports it aborted
    except psycopg.Error:
        if failed is None:
            raise
    if failed is not None:
        raise failed


def pipelined_read(
    conn: Connection, first: tuple[str, Any], then: tuple[str, Any]
) -> tuple[list[tuple[Any, ...]], psycopg.Cursor[Any]]:
    """Two statements (SQL and parameters) in one round trip, in order, in the driver's
    autocommit: the first's rows, and the second's cursor to read as its sender would."""
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    error = conn.dialect.loaded_dbapi.Error
    head, cursor = driver.cursor(), driver.cursor()

    def queue() -> None:
        head.execute(*first)
        cursor.execute(*then)

    try:
        in_pipeline(driver, queue)
        rows = head.fetchall()
    except error as exc:
        cursor.close()
        raise sa_exc.DBAPIError.instance(f"{first[0]};\n{then[0]}", None, exc, error) from exc
    finally:
        head.close()
    return rows, cursor


# The SQLSTATE of a failed `healthledger_check` (revision 0014).
CHECK_FAILED = "HL001"


def failed_check(exc: sa_exc.DBAPIError) -> str | None:
    """The failure a `healthledger_check` raised, if that is what `exc` is."""
    orig = exc.orig
    if getattr(orig, "sqlstate", None) != CHECK_FAILED:
        return None
    diag = getattr(orig, "diag", None)
    return getattr(diag, "message_primary", None) or str(orig)


def statement_batch(conn: Connection) -> StatementBatch | None:
    found: StatementBatch | None = conn.info.get(BATCH)
    return found


def postgres_engine(url: URL, *, pool_size: int) -> Engine:
    # A failed statement's error names its SQL, not its values: a log may print it.
    engine = create_engine(
        url, pool_size=pool_size, max_overflow=pool_size * 2, hide_parameters=True
    )
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
        record.info[_CHECKED_IN_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_conn: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        checked_in = record.info.get(_CHECKED_IN_AT)
        if checked_in is None or time.monotonic() - checked_in < PING_AFTER_IDLE:
            return  # new, or used moments ago
        try:
            alive = dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as exc:
            raise sa_exc.DisconnectionError() from exc
        if not alive:
            raise sa_exc.DisconnectionError()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        if conn.get_execution_options().get(BATCHED):
            batch = conn.info[BATCH] = StatementBatch(conn)
            batch.add("BEGIN", None)

    @event.listens_for(engine, "before_cursor_execute")
    def _send_waiting(conn: Connection, *_args: Any) -> None:
        # A statement SQLAlchemy executes runs after the ones waiting.
        batch = statement_batch(conn)
        if batch is not None:
            batch.send()

    @event.listens_for(engine, "commit")
    def _commit(conn: Connection) -> None:
        batch: StatementBatch | None = conn.info.pop(BATCH, None)
        if batch is None:
            return
        if not batch.sent and len(batch.waiting) == 1:
            return  # only the BEGIN waits: an empty transaction, never begun
        # psycopg's own commit, which SQLAlchemy calls next, then finds no transaction to
        # end.
        try:
            batch.send(then="COMMIT")
        except BaseException:
            # A statement failed, and the COMMIT was skipped with the rest of the
            # pipeline: the transaction is aborted, and SQLAlchemy, whose commit failed,
            # sends no ROLLBACK. psycopg's rollback ends it, so that the connection (a
            # unit of work's, which may write again) is usable.
            # A connection lost meanwhile (the server restarted, the backend was
            # terminated) has nothing to roll back, and its rollback would raise the
            # driver's own error in place of SQLAlchemy's, which the API answers as a 503.
            driver = conn.connection.driver_connection
            if driver is not None and not driver.broken:
                driver.rollback()
            raise

    @event.listens_for(engine, "rollback")
    def _rollback(conn: Connection) -> None:
        # What waits is dropped unsent; SQLAlchemy's ROLLBACK follows (psycopg sends it
        # only if the BEGIN went). A connection SQLAlchemy invalidated (lost mid-read)
        # has no batch, and asking for its `info` would raise PendingRollbackError in
        # place of the error that lost it.
        if not conn.invalidated:
            conn.info.pop(BATCH, None)

    return engine


class KnownHead:
    """What this process knows of one event table's log on PostgreSQL, for the
    aggregates known current (ADR 0011, ADR 0020): the head of the chain (its position)
    up to which every row is known to this process, and an epoch that moves whenever a
    row this process did not write is found.

    An epoch stays while the log grows only by this process's own commits: each writes
    onto the head it knew (`wrote`, with the head it read under the table lock). A unit
    of work reads the head once (`reading`): the same position means nothing else was
    committed, and the epoch it answers vouches for every aggregate kept in it. Any other
    position, or a write onto a head it did not know, starts a new epoch, and nothing
    kept before counts. Threads of the process report in any order: a report out of
    order starts a new epoch, which is only more cautious."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch = 0
        self.head: int | None = None

    def reading(self, position: int) -> int:
        """The epoch for a unit of work that read the head at `position`."""
        with self.lock:
            if position != self.head:
                self.epoch += 1
                self.head = position
            return self.epoch

    def wrote(self, before: int, after: int) -> int:
        """A commit of this process wrote rows onto the head at `before`, up to `after`:
        the epoch its saved aggregates are current in."""
        with self.lock:
            if before != self.head:
                self.epoch += 1
            self.head = after
            return self.epoch
