"""One database URL: its engines, its read and write transactions, and the unit of work.

SQLite (`sqlite.py`): one writer connection used under a process lock, its transactions
begun IMMEDIATE, and pooled readers. PostgreSQL (psycopg 3): one pooled engine; the
recorder serialises writers with a table lock.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from healthledger.adapters.persistence.schema import metadata, user_data_keys
from healthledger.adapters.persistence.sqlite import (
    WriterConnection,
    reader_engine,
    writer_engine,
)
from healthledger.adapters.persistence.unit_of_work import UnitOfWork
from sqlalchemy import Connection, MetaData, create_engine, select
from sqlalchemy.engine import make_url

log = logging.getLogger("healthledger.database")

# The WAL checkpoint after an erasure batch: tries, each waiting this long for readers of
# older snapshots, with a growing pause between them.
CHECKPOINT_ATTEMPTS = 3
CHECKPOINT_BUSY_SECONDS = 1.0
CHECKPOINT_PAUSE_SECONDS = 0.1


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
            self.writer = create_engine(
                self.url, pool_size=pool_size, max_overflow=pool_size * 2, pool_pre_ping=True
            )
            self.reader = self.writer
        self.dialect = self.writer.dialect
        # Event tables and how many recorders of this process write each (`change_mark`).
        self.log_writers: dict[str, int] = {}

    def write(self) -> AbstractContextManager[Connection]:
        """One write transaction (committed on success, rolled back on error)."""
        if self.writer_connection is None:
            return self.writer.begin()
        return self._sqlite_write(self.writer_connection)

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

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads, whose transaction ends when the block does. In a unit
        of work on SQLite, the writer's (this thread holds it): no reader to check out,
        and its pages are cached (a reader's cache is dropped after every commit of the
        writer). Anywhere else, or inside a write or another read, a reader's, which
        never sees a write's uncommitted rows."""
        writer = self.writer_connection
        if writer is not None and self.units.active and not self.units.reading:
            conn = writer.get()
            if not conn.in_transaction():
                return self._read_on_writer(conn)
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
        """The scope of one command (`UnitOfWork`); on PostgreSQL, nothing to hold."""
        if self.is_sqlite:
            return self.units.held()
        return nullcontext()

    def add_log_writer(self, table: str) -> None:
        """A recorder of this process writes events to `table` (see `change_mark`)."""
        self.log_writers[table] = self.log_writers.get(table, 0) + 1

    def change_mark(self, table: str, *, existing: bool = False) -> Hashable | None:
        """A reading of a counter that stays the same while only this process's one
        recorder of `table` writes to the database; None when no such reading can be had
        (ADR 0011).

        A unit of work takes one reading, at its first call, and answers every later call
        with it. With `existing`, no reading is taken: the answer is the unit's reading
        or, if it took none, the last one taken on the writer's connection (in an earlier
        unit, or when the connection opened). That is what a save asks for before its
        commit: an older reading is only more cautious (it differs from later readings in
        more cases), so a command that saves without loading anything reads no counter.

        Read in a unit of work, which holds the process's write lock, two equal readings
        mean that nothing was committed in between but by this process's writer. If a
        second recorder of this process writes the same table, its writes would not move
        the reading, so there is none. PostgreSQL has no such counter: None.
        """
        writer = self.writer_connection
        if writer is None or not self.units.active or self.log_writers.get(table) != 1:
            return None
        mark = self.units.mark
        if mark is None:
            if existing:
                return writer.last_mark
            mark = self.units.mark = writer.read_mark()
        return mark

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
