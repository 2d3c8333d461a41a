"""`healthledger rebuild`: every read model projected again from the whole log, into new
tables beside the live ones, in batches, then swapped in (ADR 0021).

- The log is read in pages of `batch_events`; each page is decoded (events that change no
  read model are skipped undecoded), its users' keys read in one query, and projected by
  the read models' own handlers with their writes held and run together
  (`statements.held_writes`: an `executemany` per run of one statement, a pipeline on
  PostgreSQL). Pages go about `commit_events` at a time in one transaction, which also
  records the position reached (ADR 0026).
- The new tables are the *shadow*: on SQLite a file of its own beside the database
  (`<database>-rebuild`), opened with the database attached, so that an unqualified table
  name finds the shadow's read models first and the database's event log and key store
  next; on PostgreSQL a schema of its own (`<schema>_rebuild`) first on the search path.
  The handlers' statements are the live ones, unchanged.
- The live read models keep serving, and keep following the log, all along. At the end,
  under the log's write lock (SQLite: the write lock of the database, taken from this
  process's lock; PostgreSQL: the event table's lock every event writer takes), the
  events written meanwhile are projected, and the shadow replaces the live tables in the
  same transaction (PostgreSQL: the live tables dropped and the shadow's moved into the
  schema; SQLite: their rows copied over). Then the shadow is gone.
- A crash (or Ctrl-C) leaves the shadow with its position: the next `rebuild` resumes
  there (`restart` starts over). A shadow made for other table definitions (a migration
  since) is started over.

While it runs, the objects the process had before it are left out of the garbage
collector's passes (`frozen_heap`, ADR 0026).

A rebuild never runs the erasure effects (it destroys no key); an erasure made while it
runs reaches the shadow with the tail, before the swap.
"""

from __future__ import annotations

import gc
import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import ApplicationRecorder, Mapper, Notification
from eventsourcing.utils import resolve_topic
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import READ_MODEL_TABLES
from healthledger.adapters.persistence.engine.sqlite import sqlite_engine
from healthledger.adapters.persistence.engine.statements import CompiledStatement, held_writes, run
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    create_engine,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from healthledger.adapters.persistence.projections.read_models import ReadModels

log = logging.getLogger("healthledger.rebuild")

# Events per page: what is decoded, and its writes held, at once.
BATCH_EVENTS = 5_000
# Events per transaction, in whole pages. A commit writes every database page that its
# rows touched, and rows keyed by random ids touch most pages of the shadow's tables, so
# each commit writes about the whole shadow again (SQLite: into its WAL, then the file):
# with four pages a commit, the commits took a third of the time and the rebuild ran 18%
# faster (ADR 0026).
# A crash loses the pages since the last commit; the resumed rebuild projects them again.
COMMIT_EVENTS = 20_000

# The shadow's own record of how far it got (one row), in the shadow only: it goes with it.
progress_metadata = MetaData()
rebuild_progress = Table(
    "rebuild_progress",
    progress_metadata,
    Column("id", Integer, primary_key=True),
    # The notification id of the last event projected into the shadow.
    Column("position", BigInteger, nullable=False),
    # The read models' definitions the shadow was made with (`tables_fingerprint`).
    Column("fingerprint", String(64), nullable=False),
)


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did: the events it projected, and the position an interrupted
    rebuild had reached when this one resumed it (0 for a fresh start)."""

    events: int
    resumed_from: int


def tables_fingerprint() -> str:
    """The read models' names and columns, hashed: a shadow made for others is stale."""
    described = "|".join(
        f"{table.name}:{','.join(f'{c.name} {c.type}' for c in table.columns)}"
        for table in READ_MODEL_TABLES
    )
    return hashlib.sha256(described.encode()).hexdigest()


def rebuild_read_models(
    read_models: ReadModels,
    recorder: ApplicationRecorder,
    mapper: Mapper[Any],
    *,
    progress: Callable[[int], None] = lambda n: None,
    batch_events: int = BATCH_EVENTS,
    commit_events: int = COMMIT_EVENTS,
    restart: bool = False,
) -> Rebuilt:
    """Rebuild every read model from the log of `recorder` (see the module's docstring).
    `progress` is told the events of each transaction once it is committed."""
    shadow = shadow_of(read_models.db)
    with frozen_heap():
        try:
            if restart:
                shadow.discard()
            projector = PageProjector(read_models, recorder, mapper)
            with shadow.engine().connect() as conn:
                position = shadow.position(conn)
                resumed = position or 0
                if position is None:
                    shadow.create(conn)
                    position = 0
                elif resumed:
                    log.info("resuming the rebuild after event %d", resumed)
                replayed = 0
                while True:
                    position, taken = commit_pages(
                        conn, projector, position, batch_events, commit_events
                    )
                    if not taken:
                        break
                    replayed += taken
                    progress(taken)
                # The events written meanwhile, and the swap, under the log's write lock.
                with shadow.swapping(conn, recorder):
                    while (page := projector.read(position, batch_events)) is not None:
                        projector.project(conn, page.events)
                        position = page.last
                        replayed += page.size
                        progress(page.size)
                    shadow.swap(conn)
            shadow.remove()
        finally:
            shadow.dispose()
    return Rebuilt(replayed, resumed)


def commit_pages(
    conn: Connection,
    projector: PageProjector,
    after: int,
    batch_events: int,
    commit_events: int,
) -> tuple[int, int]:
    """Project the pages after position `after` in one transaction on `conn`, until they
    hold `commit_events` events or the log ends, and record the position reached with
    them: that position, and the events projected (0: none left)."""
    position, taken = after, 0
    with conn.begin():
        while taken < commit_events:
            page = projector.read(position, batch_events)
            if page is None:
                break
            projector.project(conn, page.events)
            position, taken = page.last, taken + page.size
        if taken:
            conn.execute(update(rebuild_progress).values(position=position))
    return position, taken


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects that exist now left out of the garbage collector's passes while the
    block runs (`gc.freeze`), then given back (`gc.unfreeze`).

    A page's events and rows live until it is written, so the collector's young passes
    keep promoting them, and its full passes follow: each walked the whole heap (the
    service's modules, SQLAlchemy's and the application's objects) for garbage that is
    only ever in the page. Frozen, that heap is skipped: a rebuild 10% faster (ADR 0026).
    A process that froze its heap itself (`serve`: `settle_heap`; the test suite)
    keeps its freeze as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True)
class Page:
    """A page of the log: the events in it that change a read model, decoded; the
    position of its last row, and how many rows it had."""

    events: list[Any]
    last: int
    size: int


class PageProjector:
    """Reads the log in pages and projects them with the read models' handlers."""

    def __init__(
        self, read_models: ReadModels, recorder: ApplicationRecorder, mapper: Mapper[Any]
    ) -> None:
        self.read_models = read_models
        self.recorder = recorder
        self.mapper = mapper
        # Per topic: whether its events change a read model.
        self.projected: dict[str, bool] = {}
        self.page_query: CompiledStatement | None = None
        if isinstance(recorder, LedgerRecorder):
            c = recorder.tables.events.c
            self.page_query = CompiledStatement(
                select(c.notification_id, c.originator_id, c.originator_version, c.topic, c.state)
                .where(c.notification_id > bindparam("after", type_=c.notification_id.type))
                .order_by(c.notification_id)
                .limit(bindparam("size", type_=Integer()))
            )

    def read(self, after: int, size: int) -> Page | None:
        """The page of at most `size` rows after position `after` (None: none left).

        On our recorder's table the rows are read on the DBAPI cursor, and only those of
        topics that change a read model become notifications (their originator ids
        converted): reading is a good part of a rebuild's time."""
        query, recorder = self.page_query, self.recorder
        if query is None or not isinstance(recorder, LedgerRecorder):
            found = recorder.select_notifications(after, size, inclusive_of_start=False)
            if not found:
                return None
            chosen = [n for n in found if self.projects(n.topic)]
            return Page(self.decoded(chosen), found[-1].id, len(found))
        with recorder.db.read() as conn:
            compiled = query.compiled(conn.dialect)
            cursor = run(conn, compiled.sql, compiled.parameters({"after": after, "size": size}))
            try:
                rows = cursor.fetchall()
            finally:
                cursor.close()
        if not rows:
            return None
        to_id = compiled.result_processors[1]
        chosen = [
            Notification(
                id=position,
                originator_id=originator if to_id is None else to_id(originator),
                originator_version=version,
                topic=topic,
                state=bytes(state),
            )
            for position, originator, version, topic, state in rows
            if self.projects(topic)
        ]
        return Page(self.decoded(chosen), rows[-1][0], len(rows))

    def decoded(self, notifications: Sequence[Notification]) -> list[Any]:
        to_domain_event = self.mapper.to_domain_event
        return [to_domain_event(n) for n in notifications]

    def project(self, conn: Connection, events: Sequence[Any]) -> None:
        read_models = self.read_models
        handlers = read_models.handlers_for(conn, events)
        with held_writes(conn):
            read_models.project(conn, events, handlers)

    def projects(self, topic: str) -> bool:
        found = self.projected.get(topic)
        if found is None:
            found = self.projected[topic] = self.read_models.projects(resolve_topic(topic))
        return found


class Shadow(ABC):
    """Where a rebuild projects: tables beside the live read models."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.built: Engine | None = None

    def engine(self) -> Engine:
        """The engine of connections whose unqualified read-model tables are the
        shadow's (and every other table the database's)."""
        if self.built is None:
            self.built = self.make_engine()
        return self.built

    @abstractmethod
    def make_engine(self) -> Engine: ...

    def dispose(self) -> None:
        if self.built is not None:
            self.built.dispose()
            self.built = None

    def position(self, conn: Connection) -> int | None:
        """The position an earlier rebuild's shadow reached (None: no usable shadow)."""
        with conn.begin():
            row = (
                conn.execute(
                    select(rebuild_progress.c.position, rebuild_progress.c.fingerprint)
                ).first()
                if self.exists(conn)
                else None
            )
        if row is None:
            return None
        if row.fingerprint != tables_fingerprint():
            log.warning("an unfinished rebuild for other table definitions: started over")
            self.drop(conn)
            return None
        return int(row.position)

    def create(self, conn: Connection) -> None:
        """Make the shadow's empty read models and its progress row (position 0)."""
        with conn.begin():
            self.prepare(conn)
            # Made where the connection creates tables: the shadow. Not `checkfirst`:
            # the live tables of the same names are visible too.
            for table in (*READ_MODEL_TABLES, rebuild_progress):
                table.create(conn, checkfirst=False)
            conn.execute(
                insert(rebuild_progress).values(id=1, position=0, fingerprint=tables_fingerprint())
            )

    @abstractmethod
    def exists(self, conn: Connection) -> bool:
        """Whether the shadow has its progress row's table (in the caller's transaction)."""

    @abstractmethod
    def prepare(self, conn: Connection) -> None:
        """What the shadow needs before its tables (PostgreSQL: its schema)."""

    @abstractmethod
    def drop(self, conn: Connection) -> None:
        """Drop the shadow's tables, in a transaction of its own."""

    @abstractmethod
    def swapping(
        self, conn: Connection, recorder: ApplicationRecorder
    ) -> AbstractContextManager[Any]:
        """A transaction on `conn` that holds the log's write lock."""

    @abstractmethod
    def swap(self, conn: Connection) -> None:
        """Put the shadow's tables in place of the live ones (in the swapping transaction)."""

    def discard(self) -> None:
        """Drop an unfinished rebuild's shadow, if any."""
        with self.engine().connect() as conn:
            self.drop(conn)

    @abstractmethod
    def remove(self) -> None:
        """After the swap: whatever is left of the shadow."""


class SqliteShadow(Shadow):
    """A SQLite file beside the database, its main database, with the database attached
    as `live`: unqualified names find the shadow's tables first."""

    LIVE = "live"

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        live = db.sqlite_file
        assert live is not None
        self.live = live
        self.path = live.with_name(live.name + "-rebuild")
        # What the next transaction begins with: the swap's takes both write locks.
        self.begin = "BEGIN"

    def make_engine(self) -> Engine:
        engine = sqlite_engine(
            self.db.url.set(database=str(self.path)), begin=lambda: self.begin, poolclass=NullPool
        )
        live = str(self.live)

        @event.listens_for(engine, "connect")
        def _attach(dbapi_conn: Any, _record: Any) -> None:
            # The shadow's commits need not wait for the disk: WAL with NORMAL keeps it
            # whole through a crash, and a power cut loses only its last batches, which
            # the resumed rebuild projects again (its position is in the same commits).
            dbapi_conn.execute("PRAGMA main.synchronous=NORMAL")
            # The shadow's tables are written in key order of random ids: their pages in
            # memory (64 MiB) rather than read back from the file.
            dbapi_conn.execute("PRAGMA main.cache_size=-65536")
            dbapi_conn.execute(f"ATTACH DATABASE ? AS {self.LIVE}", (live,))
            # Rows the swap deletes from the database are overwritten, as everywhere.
            dbapi_conn.execute(f"PRAGMA {self.LIVE}.secure_delete=ON")

        return engine

    def exists(self, conn: Connection) -> bool:
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = ?",
            (rebuild_progress.name,),
        ).scalar_one()
        return bool(found)

    def prepare(self, conn: Connection) -> None:
        """The shadow's file is made by connecting to it."""

    def drop(self, conn: Connection) -> None:
        with conn.begin():
            for table in (*READ_MODEL_TABLES, rebuild_progress):
                conn.exec_driver_sql(f'DROP TABLE IF EXISTS main."{table.name}"')

    @contextmanager
    def swapping(self, conn: Connection, recorder: ApplicationRecorder) -> Iterator[None]:
        # This process's writers wait on its lock; other processes' on the database's.
        with self.db.unit_of_work():
            self.begin = "BEGIN IMMEDIATE"
            try:
                with conn.begin():
                    yield
            finally:
                self.begin = "BEGIN"

    def swap(self, conn: Connection) -> None:
        # The database's tables made again from their definitions (as the shadow's
        # were), then filled from the shadow's.
        live = MetaData()
        for table in READ_MODEL_TABLES:
            columns = ", ".join(f'"{c.name}"' for c in table.columns)
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS {self.LIVE}."{table.name}"')
            table.to_metadata(live, schema=self.LIVE).create(conn, checkfirst=False)
            conn.exec_driver_sql(
                f'INSERT INTO {self.LIVE}."{table.name}" ({columns}) '
                f'SELECT {columns} FROM main."{table.name}"'
            )

    def discard(self) -> None:
        self.dispose()
        self.remove()

    def remove(self) -> None:
        self.dispose()
        for path in (self.path, *(Path(f"{self.path}{s}") for s in ("-wal", "-shm", "-journal"))):
            path.unlink(missing_ok=True)


class PostgresShadow(Shadow):
    """A schema beside the database's (`<schema>_rebuild`), first on the search path of
    the rebuild's connections."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        with db.writer.connect() as conn:
            self.live: str = conn.exec_driver_sql("SELECT current_schema()").scalar_one()
        self.schema = f"{self.live}_rebuild"

    def make_engine(self) -> Engine:
        engine = create_engine(self.db.url, poolclass=NullPool)
        search_path = f"{quoted(self.schema)}, {quoted(self.live)}"

        @event.listens_for(engine, "connect")
        def _search_path(dbapi_conn: Any, _record: Any) -> None:
            with dbapi_conn.cursor() as cursor:
                cursor.execute(f"SET search_path TO {search_path}")
            dbapi_conn.commit()

        return engine

    def exists(self, conn: Connection) -> bool:
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = %(schema)s AND table_name = %(table)s",
            {"schema": self.schema, "table": rebuild_progress.name},
        ).scalar_one()
        return bool(found)

    def prepare(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {quoted(self.schema)} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {quoted(self.schema)}")

    def drop(self, conn: Connection) -> None:
        with conn.begin():
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {quoted(self.schema)} CASCADE")

    def swapping(
        self, conn: Connection, recorder: ApplicationRecorder
    ) -> AbstractContextManager[Any]:
        return _locked(conn, recorder)

    def swap(self, conn: Connection) -> None:
        live, shadow = quoted(self.live), quoted(self.schema)
        for table in READ_MODEL_TABLES:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {live}.{quoted(table.name)}")
            conn.exec_driver_sql(f"ALTER TABLE {shadow}.{quoted(table.name)} SET SCHEMA {live}")
        conn.exec_driver_sql(f"DROP SCHEMA {shadow} CASCADE")

    def remove(self) -> None:
        """The swap dropped the shadow's schema in its transaction."""


@contextmanager
def _locked(conn: Connection, recorder: ApplicationRecorder) -> Iterator[None]:
    """A transaction holding the lock every event writer takes first (the recorder's)."""
    lock = getattr(recorder, "lock_statement", None)
    with conn.begin():
        if lock is not None:
            conn.exec_driver_sql(lock)
        yield


def quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def shadow_of(db: Database) -> Shadow:
    return SqliteShadow(db) if db.is_sqlite else PostgresShadow(db)


def unfinished_rebuild(db: Database) -> int | None:
    """The position an interrupted rebuild reached, if one left its shadow."""
    shadow = shadow_of(db)
    try:
        if isinstance(shadow, SqliteShadow) and not shadow.path.exists():
            return None
        with shadow.engine().connect() as conn, conn.begin():
            if not shadow.exists(conn):
                return None
            found = conn.execute(select(rebuild_progress.c.position)).scalar()
            return None if found is None else int(found)
    finally:
        shadow.dispose()
