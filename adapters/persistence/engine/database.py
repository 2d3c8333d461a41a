"""One database URL: its engines, its read and write transactions, and the unit of work.

SQLite (`sqlite.py`): one writer connection used under a process lock, its transactions
begun IMMEDIATE, and pooled readers. PostgreSQL (psycopg 3, `postgres.py`): one pooled
engine, reads in the driver's autocommit, one connection per unit of work, and the
recorder's batched write; the recorder serialises writers with a table lock.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healthledger.adapters.persistence.engine.postgres import (
    BATCHED,
    KnownHead,
    pipelined_read,
    postgres_engine,
)
from healthledger.adapters.persistence.engine.schema import metadata, user_data_keys
from healthledger.adapters.persistence.engine.sqlite import (
    WriterConnection,
    reader_engine,
    writer_engine,
)
from healthledger.adapters.persistence.engine.statements import WITH_FIRST_READ, CompiledStatement
from healthledger.adapters.persistence.engine.unit_of_work import UnitOfWork
from sqlalchemy import Connection, MetaData, select, text
from sqlalchemy.engine import make_url

log = logging.getLogger("healthledger.database")

# The WAL checkpoint after an erasure batch: tries, each waiting this long for readers of
# older snapshots, with a growing pause between them.
CHECKPOINT_ATTEMPTS = 3
CHECKPOINT_BUSY_SECONDS = 1.0
CHECKPOINT_PAUSE_SECONDS = 0.1

# PostgreSQL: how long a table's rewrite (`Database.rewrite`) waits for transactions older
# than the change it rewrites away.
OLDER_SNAPSHOTS_WAIT = 30.0
# Other sessions whose snapshot or transaction is older than the transaction `xid`, in
# any database of the server: VACUUM FULL keeps the row versions they might see, and a
# session of another database holds them back too (tried on PostgreSQL 15: a repeatable
# read transaction open in another database left an erased row's old version in the
# rewritten table's pages; this check once looked at this database's sessions alone).
CURRENT_XID = text("SELECT CAST(xid(pg_current_xact_id()) AS text)")
OLDER_SNAPSHOTS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
    " AND ((backend_xmin IS NOT NULL AND age(backend_xmin) >= age(CAST(:xid AS xid)))"
    " OR (backend_xid IS NOT NULL AND age(backend_xid) >= age(CAST(:xid AS xid))))"
)


@dataclass(frozen=True)
class LogHead:
    """How to read the head of an event table's chain: the query, and its position in
    the query's rows."""

    query: CompiledStatement
    position: Callable[[Sequence[tuple[object, ...]]], int]


class Database:
    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        self.units = UnitOfWork()
        self.writer_connection: WriterConnection | None = None
        if self.is_sqlite:
            if self.url.database in (None, "", ":memory:"):
                raise ValueError("SQLite needs a file path (sqlite:///path/to/file.db)")
            self.writer = writer_engine(self.url, self.units.begin_statement)
            self.reader = reader_engine(self.url)
            self.writer_connection = WriterConnection(self.writer)
        else:
            self.writer = postgres_engine(self.url, pool_size=pool_size)
            # Reads in the driver's autocommit: no BEGIN and ROLLBACK round trips around
            # them (`postgres.py`). The same pool.
            self.reader = self.writer.execution_options(isolation_level="AUTOCOMMIT")
        self.dialect = self.writer.dialect
        # Event tables and how many recorders of this process write each (`change_mark`).
        self.log_writers: dict[str, int] = {}
        # PostgreSQL: per chained event table, what reads its head's position and what
        # this process knows of it (`postgres_mark`).
        self.log_heads: dict[str, tuple[LogHead, KnownHead]] = {}

    def write(self) -> AbstractContextManager[Connection]:
        """One write transaction (committed on success, rolled back on error)."""
        if self.writer_connection is None:
            return self.writer.begin()
        return self._sqlite_write(self.writer_connection)

    def batched_write(self) -> AbstractContextManager[Connection]:
        """A write transaction whose statements that need no answer yet wait and go
        together (PostgreSQL: `postgres.StatementBatch`); on SQLite, `write()`. For the
        writes that run compiled statements (a command's events and read models): a
        statement SQLAlchemy executes there costs a message of its own, as in
        `write()`."""
        if self.writer_connection is None:
            return self._postgres_batched_write()
        return self._sqlite_write(self.writer_connection)

    @contextmanager
    def _postgres_batched_write(self) -> Iterator[Connection]:
        units = self.units
        if units.active and not units.in_use:
            # The unit's own connection (already in the driver's autocommit).
            conn = self.unit_connection()
            units.in_use = True
            try:
                conn.execution_options(**{BATCHED: True})
                try:
                    with conn.begin():
                        yield conn
                finally:
                    conn.execution_options(**{BATCHED: False})
            finally:
                units.in_use = False
            return
        with self.writer.connect() as conn:
            # The driver's autocommit: psycopg sends no BEGIN of its own; the begin event
            # queues one.
            conn.execution_options(isolation_level="AUTOCOMMIT", **{BATCHED: True})
            with conn.begin():
                yield conn

    def unit_connection(self) -> Connection:
        """PostgreSQL: the connection of this thread's unit of work, checked out of the
        pool at its first read or write and returned at its end: one checkout a command,
        not one per statement (ADR 0020). Reads run on it in the driver's autocommit."""
        conn = self.units.connection
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None and not conn.closed:
                conn.close()
            conn = self.units.connection = self.reader.connect()
        return conn

    @contextmanager
    def _read_on_unit(self) -> Iterator[Connection]:
        conn = self.unit_connection()
        self.units.in_use = True
        pending = self._pending_mark()
        if pending is not None:
            # The unit's mark, not read yet, goes with its first compiled read.
            conn.info[WITH_FIRST_READ] = lambda sql, params: self._read_with_mark(
                conn, *pending, sql, params
            )
        try:
            yield conn
        finally:
            conn.info.pop(WITH_FIRST_READ, None)
            self.units.in_use = False
            if conn.in_transaction():
                conn.rollback()  # SQLAlchemy's own (autobegun) one: nothing to send

    @contextmanager
    def _postgres_unit(self) -> Iterator[None]:
        if self.units.active:
            yield
            return
        with self.units.scoped():
            try:
                yield
            finally:
                conn, self.units.connection = self.units.connection, None
                if conn is not None:
                    conn.close()

    @contextmanager
    def _sqlite_write(self, writer: WriterConnection) -> Iterator[Connection]:
        with self.units.lock:
            conn = writer.get()
            try:
                with conn.begin():
                    yield conn
            except BaseException:
                # A COMMIT that failed leaves SQLAlchemy's transaction ended but the
                # driver's still open: the connection is discarded (the next write opens
                # another), so that no write begins inside it.
                if not conn.invalidated and getattr(
                    conn.connection.driver_connection, "in_transaction", False
                ):
                    conn.invalidate()
                raise

    def writers_turn(self) -> AbstractContextManager[object]:
        """SQLite: the process's write lock, held across a write and what must follow its
        commit before another thread's write begins (re-entrant: the write inside takes
        it again). A recorder's knowledge of the chain's head, which the next write links
        onto, is such a thing: set after the lock of `write()` was let go, another
        thread's write could begin meanwhile and link onto the head before it (ADR 0020).
        PostgreSQL: nothing (no process lock: the recorder's table lock serialises
        writers, and a head this process guessed is checked under it)."""
        return self.units.lock if self.writer_connection is not None else nullcontext()

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads, whose transaction ends when the block does. In a unit
        of work on SQLite, the writer's (this thread holds it): no reader to check out,
        and its pages are cached (a reader's cache is dropped after every commit of the
        writer). In a unit of work on PostgreSQL, the unit's connection
        (`unit_connection`). Anywhere else, or inside a write or another read, a
        reader's, which never sees a write's uncommitted rows."""
        writer = self.writer_connection
        if writer is not None and self.units.active and not self.units.reading:
            conn = writer.get()
            if not conn.in_transaction():
                return self._read_on_writer(conn)
        elif writer is None and self.units.active and not self.units.in_use:
            # PostgreSQL: the unit's connection, unless a read or write of the unit is
            # using it (a write's uncommitted rows stay out of reads, as anywhere else).
            return self._read_on_unit()
        return self.reader.connect()

    @contextmanager
    def _read_on_writer(self, conn: Connection) -> Iterator[Connection]:
        # A compiled statement reads in the driver's autocommit; a Core statement begins
        # a transaction, a plain BEGIN (`UnitOfWork.begin_statement`), ended here.
        self.units.reading = True
        try:
            yield conn
        finally:
            self.units.reading = False
            if conn.in_transaction():
                conn.rollback()

    def unit_of_work(self) -> AbstractContextManager[None]:
        """The scope of one command (`UnitOfWork`); on PostgreSQL, no lock to hold."""
        if self.is_sqlite:
            return self.units.held()
        return self._postgres_unit()

    def add_log_writer(self, table: str, head: LogHead | None = None) -> None:
        """A recorder of this process writes events to `table` (see `change_mark`);
        `head` reads the position of its chain's head (on PostgreSQL, the change mark
        is the chain's: ADR 0020)."""
        self.log_writers[table] = self.log_writers.get(table, 0) + 1
        if head is not None and not self.is_sqlite:
            self.log_heads[table] = (head, KnownHead())

    def write_mark(self, table: str) -> Hashable | None:
        """SQLite, in a write transaction of this process's one recorder of `table`: a
        reading of the writer's `data_version`, which no other connection can move until
        the transaction ends (it holds SQLite's write lock). Equal to the reading of an
        earlier write, it means that nothing was committed in between but by this
        writer (ADR 0020: the chain's head known current). None elsewhere."""
        writer = self.writer_connection
        if writer is None or self.log_writers.get(table) != 1:
            return None
        return writer.read_mark()

    def log_written(self, table: str, before: int, after: int) -> None:
        """PostgreSQL: a commit of this process's recorder of `table` linked rows onto
        the chain's head at `before`, up to `after` (in a unit of work: the mark its
        saved aggregates are kept with)."""
        found = self.log_heads.get(table)
        if found is not None and self.log_writers.get(table) == 1:
            epoch = found[1].wrote(before, after)
            if self.units.active:
                self.units.mark = (table, epoch)

    def change_mark(self, table: str, *, existing: bool = False) -> Hashable | None:
        """A reading of a counter that stays the same while only this process's one
        recorder of `table` writes to the database; None when no such reading can be had
        (ADR 0011).

        A unit of work takes one reading, at its first call, and answers every later call
        with it. With `existing`, no reading is taken: the answer is the unit's reading
        or, if it took none, the last one taken on the writer's connection (in an earlier
        unit, or when the connection opened). That is what a save asks for to keep what
        it committed: a reading from before its commit (an older reading is only more
        cautious: it differs from later readings in more cases), so a command that saves
        without loading anything reads no counter.

        Read in a unit of work, which holds the process's write lock, two equal readings
        mean that nothing was committed in between but by this process's writer. If a
        second recorder of this process writes the same table, its writes would not move
        the reading, so there is none. PostgreSQL has no such counter: the mark there is
        this process's knowledge of the chain's head (`postgres_mark`).
        """
        if not self.units.active or self.log_writers.get(table) != 1:
            return None
        writer = self.writer_connection
        if writer is None:
            return self.postgres_mark(table, existing=existing)
        mark = self.units.mark
        if mark is None:
            if existing:
                return writer.last_mark
            mark = self.units.mark = writer.read_mark()
        return mark

    def postgres_mark(self, table: str, *, existing: bool) -> Hashable | None:
        """`change_mark` on PostgreSQL: the epoch of this process's knowledge of the
        chain's head (`postgres.KnownHead`), read once per unit of work (one statement:
        the head's position), or set by the unit's own commit (`log_written`). No
        reading before, with `existing`: there is no earlier one that would do."""
        found = self.log_heads.get(table)
        if found is None:
            return None
        mark = self.units.mark
        if mark is None and not existing:
            head, known = found
            with self.read() as conn:
                conn.info.pop(WITH_FIRST_READ, None)  # this read is the head's own
                position = head.position(head.query.rows(conn, {}))
            mark = self.units.mark = (table, known.reading(position))
        return mark

    def _pending_mark(self) -> tuple[str, LogHead, KnownHead] | None:
        """PostgreSQL, in a unit of work that took no mark yet: the one chained event
        table whose head would be its mark (`postgres_mark`), if there is one."""
        if self.units.mark is not None or len(self.log_heads) != 1:
            return None
        table, (head, known) = next(iter(self.log_heads.items()))
        if self.log_writers.get(table) != 1:
            return None
        return table, head, known

    def _read_with_mark(
        self, conn: Connection, table: str, head: LogHead, known: KnownHead, sql: str, params: Any
    ) -> Any:
        """A unit's first compiled read (its cursor), with the chain's head read in the
        same round trip, before it: the unit's mark (`postgres_mark`), taken before any
        aggregate is loaded, as a load would take it (ADR 0025). A deletion reads what it
        cascades to first, and so makes one round trip where it made two."""
        query = head.query.compiled(conn.dialect)
        rows, cursor = pipelined_read(conn, (query.sql, query.parameters({})), (sql, params))
        self.units.mark = (table, known.reading(head.position(query.converted(rows))))
        return cursor

    def create_schema(self, tables: MetaData = metadata) -> None:
        """Create the missing tables of `tables` (the service's, unless another set is
        given: the webhook receiver brings its own)."""
        with self.write() as conn:
            if not self.is_sqlite:
                # Several processes starting on an empty database would race on CREATE
                # TABLE; a transaction-scoped advisory lock makes them take turns.
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7201931)")
            tables.create_all(conn)

    def has_data_keys(self) -> bool:
        with self.read() as conn:
            return conn.execute(select(user_data_keys.c.user_id).limit(1)).first() is not None

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite database's file (None on PostgreSQL)."""
        if not self.is_sqlite or self.url.database is None:
            return None
        return Path(self.url.database)

    def rewrite(self, *tables: str) -> None:
        """After changing or deleting rows whose old values must not stay on disk (clear
        values replaced, an erased user's ids): no page of `tables` that this database
        reaches keeps them. SQLite: secure_delete overwrote them in the file; the WAL's
        older page images go with a checkpoint. PostgreSQL: an UPDATE, a DELETE or a
        DROP COLUMN leaves the old row versions in the table's file and its indexes until
        overwritten, whatever a plain VACUUM frees: `VACUUM FULL` writes each table and
        its indexes into new files (an ACCESS EXCLUSIVE lock for the while). Its WAL,
        replicas and backups are out of reach."""
        if self.is_sqlite:
            self.vacuum_key_store()  # a WAL checkpoint (TRUNCATE), whatever the table
            return
        with self.writer.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # VACUUM FULL copies an old row version that a transaction begun before the
            # change may still see (an autovacuum's ANALYZE, another process's read): wait
            # for those to end first, up to a bound.
            changed_by = conn.execute(CURRENT_XID).scalar()
            waited = 0.0
            while (
                waited < OLDER_SNAPSHOTS_WAIT
                and conn.execute(OLDER_SNAPSHOTS, {"xid": changed_by}).scalar()
            ):
                time.sleep(0.1)
                waited += 0.1
            if waited >= OLDER_SNAPSHOTS_WAIT:
                log.warning(
                    "transactions older than the change outlasted %.0f s: their row versions "
                    "may stay in the table's file until the next VACUUM FULL",
                    OLDER_SNAPSHOTS_WAIT,
                )
            for table in tables:
                # A table name of ours (a Table's), never input.
                conn.exec_driver_sql(f"VACUUM FULL {table}")

    def vacuum_key_store(self, table: str = "user_data_keys") -> bool:
        """After destroying (or rewrapping) keys in `table` (the service's key store, or
        the webhook receiver's `mirror_user_keys`): leave no old copy of them where this
        database can reach. True if that was done, False if SQLite stayed busy.

        SQLite: secure_delete overwrote the rows in the database file, but the WAL still
        holds the pages as they were before, key and all, until a checkpoint copies the
        new pages back and truncates it. TRUNCATE waits for readers of older snapshots
        (up to a short busy timeout, tried a few times); if they outlast it, it is said
        in the log and the next erasure batch (or rotation) tries again. PostgreSQL:
        VACUUM reclaims the dead rows; its WAL, replicas and backups are out of reach,
        which the next master key rotation answers (docs/operations.md)."""
        if not self.is_sqlite:
            with self.writer.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                # A table name of ours (a Table's), never input.
                conn.exec_driver_sql(f"VACUUM {table}")
            return True
        path = self.sqlite_file
        assert path is not None
        for attempt in range(CHECKPOINT_ATTEMPTS):
            # A connection of its own, outside any transaction and outside the process's
            # write lock: a checkpoint needs neither, and waits for no writer of ours.
            checkpointer = sqlite3.connect(
                path, isolation_level=None, timeout=CHECKPOINT_BUSY_SECONDS
            )
            try:
                busy, wal_frames, copied = checkpointer.execute(
                    "PRAGMA wal_checkpoint(TRUNCATE)"
                ).fetchone()
            finally:
                checkpointer.close()
            if not busy:
                return True
            log.info(
                "WAL checkpoint after destroying keys was busy (attempt %d: %d of %d frames "
                "copied)",
                attempt + 1,
                copied,
                wal_frames,
            )
            time.sleep(CHECKPOINT_PAUSE_SECONDS * (attempt + 1))
        log.warning(
            "the WAL could not be checkpointed after destroying keys: readers held it; the "
            "destroyed keys' old pages stay in the -wal file until the next checkpoint"
        )
        return False

    def dispose(self) -> None:
        if self.writer_connection is not None:
            with self.units.lock:
                self.writer_connection.close()
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()
