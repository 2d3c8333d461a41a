"""Engines, connections and pre-compiled statements for one database URL.

SQLite: WAL, synchronous=FULL (a committed deletion survives power loss), secure_delete
(erased rows are overwritten, not left in free pages), and one writer at a time: writes
begin IMMEDIATE under a process lock, so writers queue instead of failing to upgrade a
read lock. PostgreSQL (psycopg 3): one pooled engine; the recorder serialises writers.

Hot paths run pre-compiled statements through the driver (`Prepared`): SQLAlchemy
compiles each statement once per dialect, and its bind processors convert the values,
so the SQL still comes from the table definitions but costs what raw SQL costs.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from itertools import compress
from operator import is_not
from typing import Any

from healthledger.adapters.persistence.schema import (
    UTCDateTime,
    metadata,
    sqlite_datetime_text,
    user_data_keys,
)
from healthledger.domain.identifiers import uuid_hex
from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    MetaData,
    Table,
    Uuid,
    bindparam,
    create_engine,
    event,
    insert,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import ClauseElement


def insert_statement(table: Table, columns: Sequence[str]) -> Insert:
    """INSERT of the named columns, each bound to a parameter of the same name."""
    return insert(table).values({name: bindparam(name) for name in columns})


def driver_connection(conn: Connection) -> Any:
    """The DBAPI connection under a SQLAlchemy Connection."""
    return conn.connection.driver_connection


def _fast_processor(type_: Any, dialect: Any, processor: Any) -> Any:
    """The bind processor `Prepared` uses for a column type: the C-made UUID hex where
    the database has no UUID type, and SQLite's DATETIME text itself where the type's
    processor is a closure around it; otherwise SQLAlchemy's own. (`Prepared` never
    hands a processor None, which those closures exist to pass through.)"""
    if (
        isinstance(type_, Uuid)
        and type_.as_uuid
        and not (dialect.supports_native_uuid and type_.native_uuid)
    ):
        return uuid_hex
    if isinstance(type_, UTCDateTime) and dialect.name == "sqlite":
        return sqlite_datetime_text
    return processor


class Prepared:
    """A statement compiled once for a dialect, executed through the DBAPI driver.

    `driver_of` finds the DBAPI connection under a SQLAlchemy Connection (the database's
    shortcut for its writer: two SQLAlchemy properties, about a µs, on every statement)."""

    def __init__(
        self,
        statement: ClauseElement,
        dialect: Any,
        driver_of: Callable[[Connection], Any] = driver_connection,
    ) -> None:
        self._driver_of = driver_of
        compiled = statement.compile(dialect=dialect)
        self._dbapi = dialect.loaded_dbapi
        self.sql = compiled.string
        self._processors: Mapping[str, Any] = {
            name: _fast_processor(compiled.binds[name].type, dialect, p)
            for name, p in compiled._bind_processors.items()
        }
        # Values the statement binds itself (an OFFSET 0 that SQLite adds to a LIMIT...).
        self._defaults = {
            k: v for k, v in compiled.construct_params(_check=False).items() if v is not None
        }
        self._positions: Sequence[str] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        # Positional drivers (sqlite3): each parameter's name and bind processor, in the
        # statement's order, so `params` builds the tuple in one pass.
        self._plan = [(name, self._processors.get(name)) for name in self._positions or ()]
        # `execute_row`: the parameters' names in the order a row gives their values, and
        # (positional drivers, when the statement binds no values of its own) their
        # processors in that order.
        self.parameter_names: Sequence[str] = (
            self._positions
            if self._positions is not None
            else tuple(compiled.construct_params(_check=False))
        )
        positional_rows = self._positions is not None and not self._defaults
        self._row_processors = [p for _, p in self._plan] if positional_rows else None
        # For SELECTs: rows as named tuples, each value through its type's result
        # processor (UUIDs, aware datetimes and dates come back as on any other read).
        columns = list(getattr(statement, "selected_columns", ()))
        self._row = namedtuple("Row", [c.key for c in columns]) if columns else None  # type: ignore[misc]
        self._result_processors = [c.type._cached_result_processor(dialect, None) for c in columns]

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        if self._defaults:
            values = {**self._defaults, **values}
        if self._positions is not None:
            # A list comprehension, then tuple(): cheaper than a generator for a row.
            return tuple(
                [v if (v := values[name]) is None or p is None else p(v) for name, p in self._plan]
            )
        processors = self._processors
        return {
            k: (processors[k](v) if v is not None and k in processors else v)
            for k, v in values.items()
        }

    @property
    def parameter_order(self) -> Sequence[str] | None:
        """The parameters' names in the order a positional driver binds them."""
        return self._positions

    def insert_each(self, conn: Connection, params: Sequence[Sequence[Any]]) -> list[int]:
        """Run an INSERT once per row of driver values (bound as they are, in
        `parameter_order`); each row's rowid.

        sqlite3 reports the rowid of an `execute` (not of an `executemany`), which spares a
        `SELECT last_insert_rowid()`."""
        cursor = self._driver_of(conn).cursor()
        ids: list[int] = []
        try:
            for p in params:
                cursor.execute(self.sql, p)
                ids.append(cursor.lastrowid)
        except self._dbapi.Error as exc:
            raise sa_exc.DBAPIError.instance(self.sql, params, exc, self._dbapi.Error) from exc
        finally:
            cursor.close()
        return ids

    # Straight to the driver's cursor, inside the transaction SQLAlchemy opened on `conn`:
    # SQLAlchemy's per-statement machinery (contexts, events, result proxies) costs more
    # than the statement itself here. Driver errors are re-raised as SQLAlchemy's, so
    # callers handle one family of exceptions.

    def execute_row(self, conn: Connection, row: Sequence[Any]) -> Any:
        """`execute`, with the values given in `parameter_names` order: on a positional
        driver they bind through their processors with no dict in between (the users
        row of every create: its dict and lookups cost more than its INSERT's binding)."""
        return self._run(conn, self.row_params(row))

    def row_params(self, row: Sequence[Any]) -> tuple[Any, ...] | dict[str, Any]:
        """What `params` makes of the same values given as a row (`execute_row`)."""
        processors = self._row_processors
        if processors is None:
            return self.params(dict(zip(self.parameter_names, row, strict=True)))
        if len(row) != len(processors):
            raise ValueError(f"{len(row)} values for {len(processors)} parameters")
        return tuple(
            [v if v is None or p is None else p(v) for v, p in zip(row, processors, strict=False)]
        )

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> Any:
        """Run once; returns the DBAPI cursor (fetchone/fetchall)."""
        return self._run(conn, self.params(values))

    def _run(self, conn: Connection, params: Any) -> Any:
        cursor = self._driver_of(conn).cursor()
        try:
            cursor.execute(self.sql, params)
        except self._dbapi.Error as exc:
            raise sa_exc.DBAPIError.instance(self.sql, params, exc, self._dbapi.Error) from exc
        return cursor

    def fetch(self, conn: Connection, values: Mapping[str, Any]) -> list[Any]:
        """Run a SELECT; rows as named tuples of processed values."""
        assert self._row is not None, "fetch is for SELECT statements"
        cursor = self.execute(conn, values)
        try:
            raw_rows = cursor.fetchall()
        finally:
            cursor.close()
        make, processors = self._row, self._result_processors
        return [
            make(
                *(
                    p(v) if p is not None and v is not None else v
                    for p, v in zip(processors, r, strict=True)
                )
            )
            for r in raw_rows
        ]

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        params = [self.params(r) for r in rows]
        cursor = self._driver_of(conn).cursor()
        try:
            cursor.executemany(self.sql, params)
        except self._dbapi.Error as exc:
            raise sa_exc.DBAPIError.instance(self.sql, params, exc, self._dbapi.Error) from exc
        finally:
            cursor.close()


# What a unit of work inside a unit of work (or on PostgreSQL) is: nothing to hold.
_JOINED: AbstractContextManager[None] = nullcontext()


def _driver_error(statement: str, exc: sqlite3.Error) -> BaseException:
    """A sqlite3 error as the SQLAlchemy error it would have been."""
    return sa_exc.DBAPIError.instance(statement, (), exc, sqlite3.Error)


class SparseInsert:
    """An INSERT of a row whose None values are left out of the statement, not bound.

    sqlite3 binds an int, float, str or bytearray (of exactly that type) as it is, and
    looks any other value up as one to adapt: for None, a registry miss and two failed
    attribute lookups, each making a formatted AttributeError, about 2,600 instructions a
    value (callgrind). A created user's row holds eight Nones in fourteen values (no time
    zone, birth date or ingestion bounds given): they cost more than the rest of its
    binding. A column left out of an INSERT takes its default, NULL for a column with
    none, so the row stored is the same; columns with a default are refused here. One
    statement per set of columns present, compiled at its first use (at most 2**k for k
    nullable columns; a handful in practice). On PostgreSQL it stores the same rows."""

    def __init__(self, db: Database, key: Any, table: Table, columns: Sequence[str]) -> None:
        with_default = [
            name
            for name in columns
            if table.c[name].default is not None or table.c[name].server_default is not None
        ]
        if with_default:
            raise ValueError(f"columns with a default are always bound: {with_default}")
        self._db, self._key, self._table = db, key, table
        self.columns = tuple(columns)
        self._nones = (None,) * len(self.columns)
        # Per tuple of "is this value present" flags: its statement.
        self._statements: dict[tuple[bool, ...], Prepared] = {}

    def execute_row(self, conn: Connection, row: Sequence[Any]) -> None:
        """Insert `row` (values in `columns` order); its None values stay NULL."""
        if len(row) != len(self.columns):
            raise ValueError(f"{len(row)} values for {len(self.columns)} columns")
        # In C (map, compress): a Python loop over the row would cost what it saves.
        present = tuple(map(is_not, row, self._nones))
        prepared = self._statements.get(present)
        if prepared is None:
            prepared = self._statement(present)
        prepared.execute_row(conn, tuple(compress(row, present)))

    def _statement(self, present: tuple[bool, ...]) -> Prepared:
        names = tuple(compress(self.columns, present))
        prepared = self._db.prepare(
            (self._key, names), lambda: insert_statement(self._table, names)
        )
        if tuple(prepared.parameter_names) != names:
            raise RuntimeError(f"the INSERT of {self._key} binds its columns in another order")
        self._statements[present] = prepared
        return prepared


class Database:
    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        # Whether this thread is in a unit of work (and so holds the write lock), and
        # whether it is reading on the writer's connection.
        self._unit = threading.local()
        if self.is_sqlite:
            if self.url.database in (None, "", ":memory:"):
                raise ValueError("SQLite needs a file path (sqlite:///path/to/file.db)")
            # One writer: a single connection (StaticPool) used under the write lock, with
            # no pool bookkeeping or reset-on-return rollback around each command.
            self.writer = self._sqlite_engine(
                begin="BEGIN IMMEDIATE", poolclass=StaticPool, pool_reset_on_return=None
            )
            self.reader = self._sqlite_engine(begin="BEGIN")
            self._write_lock: Any = threading.Lock()
        else:
            self.writer = create_engine(
                self.url, pool_size=pool_size, max_overflow=pool_size * 2, pool_pre_ping=True
            )
            self.reader = self.writer
            self._write_lock = nullcontext()
        self.dialect = self.writer.dialect
        self._prepared: dict[Any, Prepared] = {}
        # SQLite: the one writer Connection, opened once and used only under the write
        # lock. Opening a Connection (and checking it out of the pool) per write cost as
        # much as the statements in it.
        self._writer_conn: Connection | None = None
        # Its sqlite3 connection (reached through SQLAlchemy's pool proxies otherwise).
        self._writer_driver: Any = None
        # Each time the writer connection is (re)opened: `change_mark` readings of two
        # connections never compare equal.
        self._writer_generation = 0
        # The last `change_mark` reading taken on the writer's connection.
        self._last_mark: tuple[int, int] | None = None
        # Whether SQLAlchemy invalidated a connection of the writer's pool (see
        # `_writer_connection`), and whether a SQLAlchemy statement joined the current
        # write transaction (`_SqliteWrite` then ends it through SQLAlchemy). Both are
        # flags set by engine events, so that the writer's every command asks SQLAlchemy
        # nothing.
        self._writer_lost = False
        self._sa_joined = False
        if self.is_sqlite:

            @event.listens_for(self.writer, "invalidate")
            def _lost(*_args: Any) -> None:
                self._writer_lost = True

        # Event tables and how many recorders of this process write each (`change_mark`).
        self._log_writers: dict[str, int] = {}
        self._held_unit = _HeldUnit(self)

    def _sqlite_engine(self, begin: str, **options: Any) -> Engine:
        # The driver's own transaction handling is off; we emit BEGIN ourselves.
        engine = create_engine(
            self.url,
            connect_args={"isolation_level": None, "check_same_thread": False, "timeout": 30},
            **options,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute("PRAGMA secure_delete=ON")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            driver = conn.connection.driver_connection
            if driver.in_transaction:  # type: ignore[union-attr]
                # A SQLAlchemy statement inside `write()`, which began on the driver: it
                # joins that transaction (and `write()` ends it through SQLAlchemy).
                if conn is self._writer_conn:
                    self._sa_joined = True
                return
            # A read in a unit of work asks the writer for a plain BEGIN (see `read`).
            statement = "BEGIN" if getattr(self._unit, "reading", False) else begin
            driver.execute(statement)  # type: ignore[union-attr]

        return engine

    def prepare(self, key: Any, build: Any) -> Prepared:
        """The statement `build()` compiled once for this database, cached under `key`."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = Prepared(build(), self.dialect, self._driver_of)
        return prepared

    def _driver_of(self, conn: Connection) -> Any:
        """`driver_connection`, at once for the writer's Connection (kept at hand)."""
        if conn is self._writer_conn:
            return self._writer_driver
        return driver_connection(conn)

    def _writer_connection(self) -> Connection:
        """SQLite's writer Connection; the caller holds the write lock."""
        conn = self._writer_conn
        if conn is not None and not self._writer_lost:
            return conn
        self._writer_lost = False
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None and not conn.closed:
                conn.close()  # invalidated: its sqlite3 connection is gone
            conn = self._writer_conn = self.writer.connect()
            self._writer_driver = conn.connection.driver_connection
            self._writer_generation += 1
            # The new connection's first reading: a save with no reading of its own
            # takes this one (`change_mark`).
            try:
                self._read_mark()
            except sqlite3.Error as exc:
                raise _driver_error("PRAGMA data_version", exc) from exc
        return conn

    def add_log_writer(self, table: str) -> None:
        """A recorder of this process writes events to `table` (see `change_mark`)."""
        self._log_writers[table] = self._log_writers.get(table, 0) + 1

    def change_mark(self, table: str, *, existing: bool = False) -> tuple[int, int] | None:
        """A reading of a counter that stays the same while only this process's one
        recorder of `table` writes to the database; None when no such reading can be had.

        A unit of work takes one reading, at its first call, and answers every later call
        with it. With `existing`, no reading is taken: the answer is the unit's reading
        or, if it took none, the last one taken on the writer's connection (in an earlier
        unit, or when the connection opened). That is what a save asks for, after its
        commit: any reading taken before the commit will do (`LedgerRepository`), and the
        older it is, the more cautious (it differs from later readings in more cases). So
        a command that saves without loading anything (a create) reads no counter at all.

        SQLite's `PRAGMA data_version` changes when another connection commits, and not
        for the connection's own commits. Read on the writer connection in a unit of work
        (this thread holds the process's write lock, so no other thread of this process
        writes meanwhile), two equal readings mean: nothing was committed in between but
        by this connection. One reading serves the whole unit: what it vouches for is as
        old as the unit (microseconds), and a copy that old could at worst cost the
        command a version conflict, as any load racing another process's save could. If
        a second recorder of this process writes the same table, its writes would not move
        the reading, so there is none. PostgreSQL has no such counter: None.
        """
        unit = self._unit
        if (
            not self.is_sqlite
            or not getattr(unit, "active", False)
            or self._log_writers.get(table) != 1
        ):
            return None
        mark: tuple[int, int] | None = unit.mark
        if mark is None:
            if existing:
                return self._last_mark
            mark = unit.mark = self._read_mark()
        return mark

    def _read_mark(self) -> tuple[int, int]:
        """A reading on the writer's connection (the caller holds the write lock), kept as
        the connection's last."""
        version = self._writer_driver.execute("PRAGMA data_version").fetchone()[0]
        mark = self._last_mark = (self._writer_generation, version)
        return mark

    def unit_of_work(self) -> AbstractContextManager[None]:
        """The scope of one command: on SQLite, the write lock held from the command's
        first read to its last write, and its reads run on the writer's connection.

        Transactions do not change: each `read()` and each `write()` inside is still its
        own, exactly as outside. What changes is where the reads run: on the writer's
        connection between its transactions, so they need no reader checkout and they hit
        the writer's page cache (a reader's cache is dropped after every commit of the
        writer). What it costs: another thread's command waits for this whole command, not
        only for its write, so its loads and domain work no longer overlap this command's
        fsync (with the GIL, little else could overlap; the HTTP benchmark, 8 client
        threads, stayed well above its target). A unit inside a unit (a command calling
        another) joins the outer one. On PostgreSQL it does nothing: reads and writes keep
        their pooled connections, and the recorder's table lock serialises writers.
        """
        if not self.is_sqlite or getattr(self._unit, "active", False):
            return _JOINED
        return self._held_unit

    def write(self) -> AbstractContextManager[Connection]:
        """One write transaction (committed on success, rolled back on error)."""
        if not self.is_sqlite:
            return self.writer.begin()
        write = _new_write(_SqliteWrite)  # its one field set here: no __init__ frame
        write._db = self
        return write

    @contextmanager
    def read(self) -> Iterator[Connection]:
        conn = self._writer_conn if getattr(self._unit, "active", False) else None
        if (
            conn is None
            or conn.in_transaction()
            or conn.connection.driver_connection.in_transaction  # type: ignore[union-attr]
        ):
            # Outside a unit of work, or while the writer's connection is in a transaction
            # (a write, whose uncommitted rows a read must not see, or an enclosing read
            # that began one): a reader connection.
            with self.reader.connect() as conn:
                yield conn
            return
        # Prepared statements run on the driver without a transaction, as on a reader;
        # SQLAlchemy statements begin one, which is a plain BEGIN, as on a reader, and
        # ends here, as a reader's ends when it goes back to the pool.
        outer = getattr(self._unit, "reading", False)  # a read inside a read
        self._unit.reading = True
        try:
            yield conn
        finally:
            self._unit.reading = outer
            if conn.in_transaction():
                conn.rollback()

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
        from sqlalchemy import select

        with self.read() as conn:
            return conn.execute(select(user_data_keys.c.user_id).limit(1)).first() is not None

    def vacuum_key_store(self) -> None:
        """Reclaim the space of destroyed keys (PostgreSQL keeps dead rows until vacuum)."""
        if self.is_sqlite:
            return  # secure_delete already overwrote them
        with self.writer.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM user_data_keys")

    def dispose(self) -> None:
        with self._write_lock:
            if self._writer_conn is not None:
                self._writer_conn.close()
                self._writer_conn = None
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()


# The two context managers every command enters are classes, not generators: a
# `contextlib.contextmanager` costs a generator, a wrapper object and two resumptions
# (a few µs a command, as much as a statement).


class _HeldUnit:
    """`Database.unit_of_work` on SQLite (outside a unit): the write lock, held from the
    command's first read to its last write, with the writer's connection open. It keeps
    no state of its own (that is the thread's `_unit`): one instance serves every thread."""

    __slots__ = ("_db",)

    def __init__(self, db: Database) -> None:
        self._db = db

    def __enter__(self) -> None:
        db = self._db
        db._write_lock.acquire()
        try:
            db._writer_connection()
        except BaseException:
            db._write_lock.release()
            raise
        unit = db._unit
        unit.active = True
        unit.mark = None  # the unit's `change_mark` reading

    def __exit__(self, *exc_info: object) -> None:
        db = self._db
        unit = db._unit
        unit.active = False
        unit.mark = None
        db._write_lock.release()


class _SqliteWrite:
    """`Database.write` on SQLite: one transaction on the writer's connection, under the
    process's write lock (already held in a unit of work).

    BEGIN and COMMIT go straight to the driver: SQLAlchemy's transaction (its objects and
    begin/commit events) cost a third of a user command's statements. A SQLAlchemy
    statement inside autobegins on the Connection and joins (see the engine's "begin"
    listener); the transaction then ends through SQLAlchemy, so its Connection never
    believes a transaction is open after this."""

    __slots__ = ("_conn", "_db", "_driver", "_locked")

    def __enter__(self) -> Connection:
        db = self._db
        in_unit = getattr(db._unit, "active", False)
        self._locked = not in_unit
        if self._locked:
            db._write_lock.acquire()
        try:
            # A unit of work opened the writer's connection when it began.
            conn = self._conn = db._writer_conn if in_unit else db._writer_connection()
            driver = self._driver = db._writer_driver
            try:
                driver.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _driver_error("BEGIN IMMEDIATE", exc) from exc
        except BaseException:
            if self._locked:
                db._write_lock.release()
            raise
        return conn

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        conn, driver = self._conn, self._driver
        try:
            if exc_type is not None:
                self._roll_back()
                return
            db = self._db
            try:
                if db._sa_joined:
                    db._sa_joined = False
                    conn.commit()
                else:
                    try:
                        # From the connection's statement cache, as BEGIN is:
                        # `sqlite3.Connection.commit()` prepares COMMIT anew every time.
                        driver.execute("COMMIT")
                    except sqlite3.Error as exc:
                        raise _driver_error("COMMIT", exc) from exc
            except BaseException:
                self._roll_back()
                raise
        finally:
            if self._locked:
                self._db._write_lock.release()

    def _roll_back(self) -> None:
        # SQLAlchemy's transaction, if a statement began one, even one a failed COMMIT
        # left inactive (until rolled back, the Connection refuses work).
        conn, driver = self._conn, self._driver
        self._db._sa_joined = False
        if conn.get_transaction() is not None:
            conn.rollback()
        if driver.in_transaction:
            driver.rollback()


_new_write = object.__new__
