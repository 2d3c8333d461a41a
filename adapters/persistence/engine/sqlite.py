"""SQLite specifics: the PRAGMAs every connection gets, transactions begun as SQLAlchemy's
pysqlite recipe begins them, and the one writer connection.

WAL, synchronous=FULL (a committed deletion survives power loss), secure_delete (erased
rows are overwritten, not left in free pages). The driver's own transaction handling is
off (`isolation_level=None`) and a `"begin"` engine event emits the BEGIN, as
SQLAlchemy's documentation shows for pysqlite: the writer's transactions begin
IMMEDIATE, so writers queue on SQLite's lock instead of failing to upgrade a read lock;
readers begin a plain (deferred) transaction.

The database file is created here, before SQLite opens it, readable and writable by its
owner only (0600): it holds personal data, sealed or not, and the usual umask would give
it 0644. SQLite creates the -wal and -shm files with the database file's mode.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import StaticPool

PRAGMAS = (
    # The busy timeout first, so that the statements after it wait for a lock.
    "PRAGMA busy_timeout=30000",
    "PRAGMA synchronous=FULL",
    "PRAGMA secure_delete=ON",
    "PRAGMA foreign_keys=ON",
)
# How long a new connection retries a PRAGMA that SQLite answers "database is locked"
# without calling the busy handler (it does so for journal_mode while another process
# holds the file exclusively: a checkpoint that truncates the WAL, a VACUUM at start).
PRAGMA_RETRY_SECONDS = 30.0
PRAGMA_RETRY_PAUSE = 0.05


# The mode of a database file the service creates (its -wal and -shm files follow it).
FILE_MODE = 0o600


def create_private(url: URL) -> None:
    """Create the SQLite file `url` names, empty (SQLite's empty database) and 0600, if it
    does not exist yet; an existing file is left as it is. Nothing for an in-memory or
    URI-named database, or a directory that does not exist (SQLite then says so)."""
    path = url.database
    if not path or path == ":memory:" or path.startswith("file:") or url.query.get("uri"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except (FileExistsError, FileNotFoundError, NotADirectoryError):
        return
    try:
        os.fchmod(fd, FILE_MODE)  # whatever the umask took away or not
    finally:
        os.close(fd)


def sqlite_engine(url: URL, *, begin: Callable[[], str], **options: Any) -> Engine:
    """An engine whose connections get `PRAGMAS` and whose transactions begin with the
    statement `begin()` names ("BEGIN IMMEDIATE" for a write, "BEGIN" for a read); its
    file is created 0600 if it does not exist (`create_private`)."""
    create_private(url)
    engine = create_engine(
        url,
        connect_args={"isolation_level": None, "check_same_thread": False, "timeout": 30},
        # A failed statement's error names its SQL, not its values: a log may print it.
        hide_parameters=True,
        **options,
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        try:
            for pragma in PRAGMAS:
                execute_waiting(cursor, pragma)
            # WAL is a property of the file: set once, by the first connection. Asking
            # for it again on a file already in WAL takes a lock that SQLite does not
            # wait for while another process writes, so it is asked only when missing.
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                execute_waiting(cursor, "PRAGMA journal_mode=WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Straight on the driver, as SQLAlchemy's own `do_begin` would: a statement
        # executed through the Connection here would cost as much as the transaction.
        statement = begin()
        driver = conn.connection.driver_connection
        assert driver is not None
        try:
            driver.execute(statement)
        except sqlite3.Error as exc:
            raise sa_exc.DBAPIError.instance(statement, (), exc, sqlite3.Error) from exc

    return engine


def writer_engine(url: URL, begin: Callable[[], str]) -> Engine:
    # One writer: a single connection (StaticPool), used under the process's write lock,
    # with no reset-on-return rollback (every write ends its own transaction).
    return sqlite_engine(url, begin=begin, poolclass=StaticPool, pool_reset_on_return=None)


def reader_engine(url: URL) -> Engine:
    return sqlite_engine(url, begin=lambda: "BEGIN")


class WriterConnection:
    """The writer engine's one Connection, opened at first use and kept open: opening a
    Connection (and checking it out of the pool) per write cost as much as the
    statements in it. Used only under the process's write lock (`UnitOfWork`).

    It also reads SQLite's `PRAGMA data_version` for the ledger's change mark (ADR 0011):
    the counter moves when another connection commits, never for this connection's own
    commits. A reading is paired with the connection's generation (how many times it was
    opened), so readings of two connections never compare equal."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.generation = 0
        self.last_mark: tuple[int, int] | None = None
        self.lost = False
        self.current: Connection | None = None

        @event.listens_for(engine, "invalidate")
        def _lost(*_args: Any) -> None:
            self.lost = True

    def get(self) -> Connection:
        """The writer's Connection, reopened if SQLAlchemy invalidated it; the caller
        holds the write lock."""
        conn = self.current
        if conn is not None and not self.lost:
            return conn
        self.lost = False
        if conn is not None and not conn.closed:
            conn.close()
        conn = self.current = self.engine.connect()
        self.generation += 1
        # The new connection's first reading: a save with no reading of its own takes
        # this one (`Database.change_mark`).
        self.read_mark()
        return conn

    def read_mark(self) -> tuple[int, int]:
        """A reading of `PRAGMA data_version` on the writer's connection, outside any
        transaction (the driver's own, so SQLAlchemy begins none), kept as the last."""
        conn = self.current if self.current is not None and not self.lost else self.get()
        driver = conn.connection.driver_connection
        assert driver is not None
        version = driver.execute("PRAGMA data_version").fetchone()[0]
        mark = self.last_mark = (self.generation, version)
        return mark

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def execute_waiting(cursor: sqlite3.Cursor, statement: str) -> None:
    """`statement`, tried again while SQLite answers "database is locked" (a process
    starting beside another that holds the file for a moment), for at most
    PRAGMA_RETRY_SECONDS; any other error, or the lock held longer, is raised."""
    deadline = time.monotonic() + PRAGMA_RETRY_SECONDS
    while True:
        try:
            cursor.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(PRAGMA_RETRY_PAUSE)
