"""Schema migrations: Alembic, run from code on one SQLAlchemy URL.

Two migration lines, each an Alembic script directory inside this package (so they ship in
the wheel, and no alembic.ini is needed at run time) with its own version table:

- `SERVICE`: the service's tables (`schema.py`), versions in `alembic_version`;
- `MIRROR`: the webhook receiver's tables (`persistence/engine/mirror_schema.py`), which live in a
  customer's database beside other tables, so their versions are kept in
  `healthledger_mirror_alembic_version`.

A database written before migrations existed has a line's tables but no version table: its
tables are compared with what the line's baseline revision creates and, if they are the
same, it is stamped at the baseline and upgraded from there. An empty database is upgraded
from nothing. Upgrades run in one transaction that first takes a lock (SQLite: the write
lock, by BEGIN IMMEDIATE; PostgreSQL: a transaction-scoped advisory lock), so processes
starting together on one database migrate one after the other, and the second finds
nothing left to do.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from alembic import command, context
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, MetaData, create_engine, event, func, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

log = logging.getLogger("healthledger.migrations")

MigrateOnStart = Literal["apply", "refuse"]

_SCRIPTS = "healthledger.adapters.persistence.migrations"
# An execution option of our SQLite connections: begin IMMEDIATE (take the write lock).
_WRITE_LOCK = "healthledger_write_lock"


@dataclass(frozen=True)
class MigrationLine:
    """One set of tables that migrates on its own."""

    name: str
    # Alembic's script directory, as a package resource ("package:folder").
    script_location: str
    version_table: str
    # The revision that creates the tables as `create_all` made them before migrations.
    baseline: str
    # PostgreSQL advisory lock key held while this line upgrades.
    lock_key: int


SERVICE = MigrationLine(
    name="service",
    script_location=f"{_SCRIPTS}:service",
    version_table="alembic_version",
    baseline="0001",
    # The key `Database.create_schema` took before migrations.
    lock_key=7201931,
)
MIRROR = MigrationLine(
    name="mirror",
    script_location=f"{_SCRIPTS}:mirror",
    version_table="healthledger_mirror_alembic_version",
    baseline="m0001",
    lock_key=7201932,
)


@dataclass(frozen=True)
class Revision:
    revision: str
    message: str

    def describe(self) -> str:
        return f"{self.revision}  {self.message}"


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands on a migration line."""

    line: MigrationLine
    # The revision the database is at (None: not under migrations yet).
    current: str | None
    head: str
    # Its tables are the baseline's but unstamped: written before migrations existed.
    before_migrations: bool
    # What an upgrade would apply, oldest first.
    pending: tuple[Revision, ...]

    @property
    def up_to_date(self) -> bool:
        return not self.pending and not self.before_migrations


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade` did."""

    line: MigrationLine
    before: str | None
    # The baseline, when the database was written before migrations and stamped at it.
    stamped: str | None
    applied: tuple[Revision, ...]
    after: str


class MigrationError(RuntimeError):
    """The schema cannot be brought to this version's head (or must not be, at start)."""


class PendingMigrations(MigrationError):
    def __init__(self, state: SchemaState) -> None:
        self.state = state
        what = [r.revision for r in state.pending]
        if state.before_migrations:
            what.insert(0, f"stamp {state.line.baseline} (written before migrations)")
        super().__init__(
            f"the database's {state.line.name} schema has pending migrations "
            f"({', '.join(what)}), and HEALTHLEDGER_MIGRATE_ON_START is refuse: run "
            "`healthledger migrate` first"
        )


def upgrade(url: str, line: MigrationLine = SERVICE) -> Upgrade:
    """Bring the database at `url` to the head of `line`; a no-op (one version read) when
    it is there already."""
    with _engine(url) as engine:
        state = _read_state(engine, line)
        if state.up_to_date:
            return Upgrade(line, state.current, None, (), state.head)
        with _locked(engine, line) as conn:
            # Again under the lock: another process may have migrated meanwhile.
            state = _state(conn, line)
            stamped = None
            if state.before_migrations:
                _run(line, conn, lambda config: command.stamp(config, line.baseline))
                stamped = line.baseline
            if state.pending:
                _run(line, conn, lambda config: command.upgrade(config, "head"))
            after = _current(conn, line)
    if stamped is not None:
        log.info("%s schema: written before migrations, stamped %s", line.name, stamped)
    for revision in state.pending:
        log.info("%s schema: applied %s", line.name, revision.describe())
    return Upgrade(line, state.current, stamped, state.pending, after or state.head)


def downgrade(url: str, revision: str, line: MigrationLine = SERVICE) -> None:
    """Take the database at `url` back to `revision` of `line`, each later revision's
    downgrade newest first: a rollback by hand, and the tests that start a service on a
    database as an older main left it (the next start applies the rest again)."""
    with _engine(url) as engine, _locked(engine, line) as conn:
        _run(line, conn, lambda config: command.downgrade(config, revision))


def schema_state(url: str, line: MigrationLine = SERVICE) -> SchemaState:
    """Where the database at `url` stands on `line` (it is not changed)."""
    with _engine(url) as engine:
        return _read_state(engine, line)


def at_start(url: str, on_start: MigrateOnStart, line: MigrationLine = SERVICE) -> None:
    """At start: apply pending migrations, or (`refuse`) raise `PendingMigrations`."""
    if on_start == "apply":
        upgrade(url, line)
        return
    state = schema_state(url, line)
    if not state.up_to_date:
        raise PendingMigrations(state)


def alembic_config(line: MigrationLine, url: str | None = None) -> Config:
    """Alembic's configuration of `line`, with no ini file. With `url`, Alembic's own
    commands connect there themselves (e.g. `command.revision(config, ...,
    autogenerate=True)` to write a new revision: see docs/adr/0012)."""
    config = Config()
    config.set_main_option("script_location", line.script_location)
    # Revision files are modules of the package, named in their chain's order (revision ids
    # are not in order: 0013 came after 0005): `step_NN_r<revision>_<slug>`, NN the next
    # step. Alembic's template has no step counter, so the next one is counted here.
    config.set_main_option("file_template", f"step_{next_step(line):02d}_r%%(rev)s_%%(slug)s")
    # A written revision is formatted as the rest of the code (ruff: the test extras).
    config.set_section_option("post_write_hooks", "hooks", "ruff")
    config.set_section_option("post_write_hooks", "ruff.type", "module")
    config.set_section_option("post_write_hooks", "ruff.module", "ruff")
    config.set_section_option("post_write_hooks", "ruff.options", "format REVISION_SCRIPT_FILENAME")
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def version_files(line: MigrationLine) -> list[str]:
    """The names of `line`'s revision files, in the order of their names."""
    package, folder = line.script_location.split(":")
    versions = resources.files(package).joinpath(folder, "versions")
    return sorted(
        entry.name
        for entry in versions.iterdir()
        if entry.name.startswith("step_") and entry.name.endswith(".py")
    )


def next_step(line: MigrationLine) -> int:
    return len(version_files(line)) + 1


def run_env(line: MigrationLine, target: MetaData) -> None:
    """The body of each line's env.py: run the migrations on the connection `upgrade`
    hands over, or on the configured URL (Alembic's own commands), or write their SQL
    (Alembic's offline mode, `command.upgrade(config, "head", sql=True)`: a script for a
    DBA who applies migrations by hand, and the test suite's PostgreSQL schemas)."""
    if context.is_offline_mode():
        context.configure(
            url=context.config.get_main_option("sqlalchemy.url"),
            target_metadata=target,
            version_table=line.version_table,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate_on(connection, line, target)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise MigrationError("no connection and no sqlalchemy.url to migrate")
    with _engine(url) as engine, _locked(engine, line) as conn:
        _migrate_on(conn, line, target)


def _migrate_on(conn: Connection, line: MigrationLine, target: MetaData) -> None:
    context.configure(
        connection=conn,
        target_metadata=target,
        version_table=line.version_table,
        # A revision written by autogenerate alters SQLite tables by copy and move
        # (SQLite's ALTER TABLE cannot change or drop most things).
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


# -- reading where a database stands ---------------------------------------------------


def _read_state(engine: Engine, line: MigrationLine) -> SchemaState:
    with engine.connect() as conn:
        return _state(conn, line)


def _state(conn: Connection, line: MigrationLine) -> SchemaState:
    script = _scripts(line)
    head = script.get_current_head()
    assert head is not None, f"the {line.name} line has no revision"
    current = _current(conn, line)
    before_migrations = False
    if current is None:
        before_migrations = _written_before_migrations(conn, line)
    elif current != head:
        try:
            script.get_revision(current)
        except CommandError:
            raise MigrationError(
                f"the database's {line.name} schema is at revision {current}, which this "
                "version of healthledger does not know (a newer version migrated it)"
            ) from None
    lower = line.baseline if before_migrations else (current or "base")
    pending = (
        ()
        if lower == head
        else tuple(
            Revision(r.revision, " ".join((r.doc or "").split()))
            for r in reversed(list(script.iterate_revisions(head, lower)))
            if r.revision != lower
        )
    )
    return SchemaState(line, current, head, before_migrations, pending)


def _current(conn: Connection, line: MigrationLine) -> str | None:
    context = MigrationContext.configure(conn, opts={"version_table": line.version_table})
    heads = context.get_current_heads()
    if len(heads) > 1:
        raise MigrationError(f"the database's {line.name} schema has several heads: {heads}")
    return heads[0] if heads else None


def _written_before_migrations(conn: Connection, line: MigrationLine) -> bool:
    """Whether an unstamped database holds the line's tables as its baseline makes them
    (True), or none of them (False: it is upgraded from nothing). Anything in between is
    refused: it is no schema any version of healthledger wrote."""
    baseline = _baseline_tables(line)
    found = _tables(conn, baseline)
    if not found:
        return False
    if found == baseline:
        return True
    missing = sorted(set(baseline) - set(found))
    differing = sorted(t for t in found if found[t] != baseline[t])
    raise MigrationError(
        f"the database holds some of the {line.name} tables but not as healthledger wrote "
        f"them before migrations (missing: {', '.join(missing) or 'none'}; other columns: "
        f"{', '.join(differing) or 'none'}); it is left as it is"
    )


def _tables(
    conn: Connection, names: Mapping[str, frozenset[str]] | None = None
) -> dict[str, frozenset[str]]:
    """Each table's column names: of every table, or of those of `names` that exist."""
    inspector = inspect(conn)
    present = set(inspector.get_table_names())
    wanted = present if names is None else present & set(names)
    return {
        table: frozenset(column["name"] for column in inspector.get_columns(table))
        for table in wanted
    }


@functools.cache
def _baseline_tables(line: MigrationLine) -> Mapping[str, frozenset[str]]:
    """What the line's baseline revision creates, found by running it on an empty
    in-memory SQLite database (so the revision is the only description of it)."""
    engine = create_engine("sqlite://", poolclass=NullPool)
    try:
        with engine.begin() as conn:
            _run(line, conn, lambda config: command.upgrade(config, line.baseline))
            tables = _tables(conn)
    finally:
        engine.dispose()
    tables.pop(line.version_table)
    return tables


@functools.cache
def _scripts(line: MigrationLine) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(line))


# -- connections -------------------------------------------------------------------------


# Alembic's `context` (what env.py reads its connection from) is one proxy per process,
# not per thread: two services opened at once in one process (the embedding facade, the
# tests' starters) would run each other's revisions on each other's connections. The
# database's own lock orders processes; this orders the threads of one.
_ALEMBIC = threading.RLock()


def _run(line: MigrationLine, conn: Connection, action: Callable[[Config], None]) -> None:
    config = alembic_config(line)
    config.attributes["connection"] = conn
    with _ALEMBIC:
        action(config)


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    """A short-lived engine of its own (no pool): migrating happens once, at start."""
    if make_url(url).get_backend_name() != "sqlite":
        engine = create_engine(url, poolclass=NullPool)
    else:
        engine = create_engine(
            url, poolclass=NullPool, connect_args={"isolation_level": None, "timeout": 30}
        )

        # SQLAlchemy's documented pysqlite recipe: the driver's own transaction handling
        # is off and each transaction begins here, so DDL is transactional too (a failed
        # migration leaves nothing behind).
        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get(_WRITE_LOCK, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def _locked(engine: Engine, line: MigrationLine) -> Iterator[Connection]:
    """One transaction, holding the lock that makes migrating processes take turns."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE_LOCK: True})
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(select(func.pg_advisory_xact_lock(line.lock_key)))
            yield conn
