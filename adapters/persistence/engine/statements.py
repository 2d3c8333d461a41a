"""Statements compiled once per dialect and run on the DBAPI cursor.

A user command runs a few statements on its hot path, and SQLAlchemy's execution of a
statement (an execution context, the compiled-cache lookup, generic parameter
processing, a result object) costs more than the statement itself (ADR 0014). A
`CompiledStatement` is the same Core statement (the SQL still comes from the table
definitions), compiled once with SQLAlchemy's public API: its SQL text and parameter
order (`compiled.string`, `compiled.positiontup`, `compiled.params`), each value
converted by its column type's own processors (`dialect_impl(dialect).bind_processor`,
`.result_processor`). It runs on the connection's DBAPI cursor, inside whatever
transaction SQLAlchemy began on that connection; transactions stay SQLAlchemy's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import (
    ARRAY,
    BinaryExpression,
    BindParameter,
    ColumnElement,
    Connection,
    Delete,
    Dialect,
    Insert,
    Table,
    Update,
    any_,
    bindparam,
    delete,
    event,
    insert,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql import ClauseElement, operators, visitors
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any]


def insert_of(table: Table, columns: Sequence[str]) -> Insert:
    """INSERT of the named columns (and no others), each bound to a parameter of the
    same name."""
    return insert(table).values(
        {name: bindparam(name, type_=table.c[name].type) for name in columns}
    )


def insert_rows_of(table: Table, columns: Sequence[str], rows: int) -> Insert:
    """INSERT of `rows` rows of the named columns in one statement, each value bound to a
    parameter named after its column and its row's number (`topic_0`, `topic_1`...)."""
    return insert(table).values(
        [
            {name: bindparam(f"{name}_{number}", type_=table.c[name].type) for name in columns}
            for number in range(rows)
        ]
    )


def among(column: ColumnElement[Any], name: str, *, postgres: bool) -> ColumnElement[bool]:
    """`column` among the values of the list parameter `name`: on PostgreSQL one array
    parameter (`= ANY`), bound as one value (psycopg rewrites a statement's placeholders
    in Python, and an expanding IN of a thousand ids is a thousand of them); elsewhere an
    expanding IN."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True, type_=column.type))


def delete_by(table: Table, column: str) -> Delete:
    """DELETE of the rows whose `column` equals the parameter `row_key`."""
    return delete(table).where(table.c[column] == bindparam("row_key", type_=table.c[column].type))


class UpdatesByKey:
    """UPDATE of the row(s) whose `key` column equals a value, setting the columns a call
    names: a `CompiledStatement` per set of columns (a projection's handler sets a few
    fixed sets). A column in `expressions` is set to its expression over the bound value
    (e.g. keep an earlier value), any other to the value."""

    def __init__(
        self,
        table: Table,
        key: str,
        expressions: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        self.table = table
        self.key = table.c[key]
        self.expressions = dict(expressions or {})
        self.by_columns: dict[tuple[str, ...], CompiledStatement] = {}

    def execute(self, conn: Connection, key: Any, values: Mapping[str, Any]) -> None:
        columns = tuple(values)
        statement = self.by_columns.get(columns)
        if statement is None:
            statement = self.by_columns[columns] = CompiledStatement(self.statement(columns))
        statement.execute(conn, {**values, "row_key": key})

    def statement(self, columns: Sequence[str]) -> ClauseElement:
        c = self.table.c
        assignments = {}
        for name in columns:
            bound = bindparam(name, type_=c[name].type)
            expression = self.expressions.get(name)
            assignments[name] = bound if expression is None else expression(bound)
        key = bindparam("row_key", type_=self.key.type)
        return self.table.update().where(self.key == key).values(assignments)


class Compiled:
    """A statement compiled for one dialect."""

    def __init__(
        self,
        statement: ClauseElement,
        dialect: Dialect,
        row_key: Sequence[str] | None = None,
        copy_columns: Sequence[str] | None = None,
    ) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler), "a Core statement compiles to SQL"
        # PostgreSQL: the COPY that takes a run of this INSERT's rows (`HeldWrites`).
        self.copy_columns = tuple(copy_columns or ())
        self.copy_sql: str | None = None
        table = getattr(statement, "table", None)
        if copy_columns and dialect.name == "postgresql" and isinstance(table, Table):
            quote = dialect.identifier_preparer.quote
            column_list = ", ".join(quote(name) for name in copy_columns)
            self.copy_sql = f"COPY {quote(table.name)} ({column_list}) FROM STDIN"
        self.sql = compiled.string
        params = compiled.params
        # Values the statement binds itself (the OFFSET 0 SQLite adds to a LIMIT...).
        self.defaults = {name: value for name, value in params.items() if value is not None}
        # Positional drivers (sqlite3): the parameters' names in the statement's order.
        self.positions: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        # Every value goes through its type's processor, None too, as SQLAlchemy's own
        # execution does: a JSON column's None is JSON `null`, not SQL NULL (a rebuild and
        # the live projection write the same bytes as rows written before this class).
        names = self.positions if self.positions is not None else tuple(params)
        # A name bound in several places (a value set, and the same value inside an
        # expression: `coalesce(first_failure_at, :at)`) has a bind per place, and an
        # untyped one has no processor: the typed one's converts the value, as in
        # SQLAlchemy's own execution.
        found: dict[str, Processor | None] = {}
        for bind, name in compiled.bind_names.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None or name not in found:
                found[name] = processor
        self.processors: dict[str, Processor | None] = {name: found.get(name) for name in names}
        self.plan = [(name, self.processors[name]) for name in self.positions or ()]
        # Where the driver values hold the row's key (`row_key_of`): their indexes for a
        # positional driver, else their names.
        self.key_at: tuple[Any, ...] | None = None
        if row_key is not None:
            positions = self.positions
            self.key_at = tuple(
                name if positions is None else positions.index(name) for name in row_key
            )
        # The columns a SELECT (or an INSERT ... RETURNING) answers, each value converted
        # back by its type's own processor.
        self.result_processors: list[Processor | None] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in getattr(statement, "exported_columns", ())
        ]

    def row_key(self, values: Any) -> tuple[Any, ...] | None:
        """The key of the row a write with these driver values touches (None: unknown)."""
        key_at = self.key_at
        return None if key_at is None else tuple([values[at] for at in key_at])

    def row_parameters(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """What a positional driver binds for `values` given in the statement's parameter
        order (`positions`), for a statement that binds no values of its own."""
        if self.positions is None or self.defaults:
            raise TypeError("values in order are for positional statements with no defaults")
        if len(values) != len(self.plan):
            raise ValueError(f"{len(values)} values for {len(self.plan)} parameters")
        return tuple(
            [
                value if processor is None else processor(value)
                for value, (_, processor) in zip(values, self.plan, strict=True)
            ]
        )

    def converted(self, fetched: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The rows the driver fetched, each value converted as SQLAlchemy converts it."""
        processors = self.result_processors
        return [
            tuple(
                value if processor is None or value is None else processor(value)
                for processor, value in zip(processors, row, strict=True)
            )
            for row in fetched
        ]

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """What the driver binds for `values` (keyed by parameter name)."""
        if self.defaults:
            values = {**self.defaults, **values}
        if self.positions is not None:
            row = []
            for name, processor in self.plan:
                value = values[name]
                row.append(value if processor is None else processor(value))
            return tuple(row)
        processors = self.processors
        return {
            name: value if (processor := processors.get(name)) is None else processor(value)
            for name, value in values.items()
        }


class CompiledStatement:
    """A Core statement, compiled at its first use on each kind of database."""

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        # Per (dialect name, driver, paramstyle): the statement compiled for it.
        self.by_dialect: dict[tuple[str, str, str], Compiled] = {}
        # The one table a write touches, reading no other (see `HeldWrites`); None for a
        # read, or a write that reads another table too.
        touched = {t.name for t in visitors.iterate(statement) if isinstance(t, Table)}
        target = getattr(statement, "table", None)
        self.holdable_in: str | None = (
            target.name if isinstance(target, Table) and touched == {target.name} else None
        )
        # The parameters that name the one row the write touches, by its table's primary
        # key (None: it may touch others).
        self.row_key = row_key_of(statement)
        # An INSERT of one row whose values are bound by their columns' names: a run of it
        # can go as a COPY of those columns (on PostgreSQL, `HeldWrites`).
        self.copy_columns: tuple[str, ...] | None = None
        if isinstance(statement, Insert) and self.row_key is not None:
            assert isinstance(target, Table)
            bound = tuple(statement.compile().params)
            if all(name in target.c for name in bound):
                self.copy_columns = bound

    def compiled(self, dialect: Dialect) -> Compiled:
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        found = self.by_dialect.get(key)
        if found is None:
            found = self.by_dialect[key] = Compiled(
                self.statement, dialect, self.row_key, self.copy_columns
            )
        return found

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> int | None:
        """Run once with `values`; the id of the row it inserted, where the driver
        reports one (sqlite3's `lastrowid`). While the connection's writes are held
        (`held_writes`), a write is held with them (and reports no id)."""
        compiled = self.compiled(conn.dialect)
        held = HELD.get()
        if held is not None and held.conn is conn:
            if self.holdable_in is not None:
                held.hold(self.holdable_in, compiled, compiled.parameters(values))
                return None
            held.flush()
        cursor = run(conn, compiled.sql, compiled.parameters(values))
        try:
            return getattr(cursor, "lastrowid", None)
        finally:
            cursor.close()

    def execute_row(self, conn: Connection, values: Sequence[Any]) -> int | None:
        """`execute`, with the values in the statement's parameter order (a positional
        driver's: see `Compiled.row_parameters`)."""
        compiled = self.compiled(conn.dialect)
        flush_held(conn)
        cursor = run(conn, compiled.sql, compiled.row_parameters(values))
        try:
            return getattr(cursor, "lastrowid", None)
        finally:
            cursor.close()

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run a SELECT; its rows, each value converted as SQLAlchemy converts it."""
        return self.rows_later(conn, values)()

    def rows_later(
        self, conn: Connection, values: Mapping[str, Any]
    ) -> Callable[[], list[tuple[Any, ...]]]:
        """`rows`, whose rows are read when the answer is called: in a batched write
        (`Database.batched_write`) the statement waits until then, and goes with
        whatever else waits, in one message."""
        compiled = self.compiled(conn.dialect)
        flush_held(conn)  # a read sees every write before it
        parameters = compiled.parameters(values)
        cursor = run(conn, compiled.sql, parameters)

        def answer() -> list[tuple[Any, ...]]:
            error = conn.dialect.loaded_dbapi.Error
            try:
                # In a batched write, the error of any statement sent with this one.
                fetched = cursor.fetchall()
            except error as exc:
                raise sa_exc.DBAPIError.instance(
                    compiled.sql, parameters, exc, error, hide_parameters=True
                ) from exc
            finally:
                cursor.close()
            return compiled.converted(fetched)

        return answer

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run once per row (the driver's executemany)."""
        if rows:
            compiled = self.compiled(conn.dialect)
            params = [compiled.parameters(row) for row in rows]
            held = HELD.get()
            if held is not None and held.conn is conn:
                if self.holdable_in is not None:
                    for row in params:
                        held.hold(self.holdable_in, compiled, row)
                    return
                held.flush()
            run(conn, compiled.sql, params, many=True).close()


# Where a connection keeps the statements of a batched write waiting to be sent
# (PostgreSQL: `postgres.StatementBatch`), if it has one.
BATCH = "healthledger_statement_batch"
# Where a connection keeps what runs its next statement together with another read
# (PostgreSQL: a unit of work's mark, `Database._read_with_mark`), once.
WITH_FIRST_READ = "healthledger_with_first_read"


def run(conn: Connection, sql: str, params: Any, *, many: bool = False) -> Any:
    """Run `sql` on the connection's DBAPI cursor: in whatever transaction SQLAlchemy
    began on that connection, or in none (a single read runs in the driver's autocommit).
    A driver error is raised as the SQLAlchemy error it would have been. In a batched
    write (`Database.batched_write`) the statement waits in its batch, and what answers
    is the batch's (its rows are read, and errors raised, when it is sent)."""
    batch = conn.info.get(BATCH)
    if batch is not None:
        return batch.add(sql, params, many=many)
    if not many:
        with_read = conn.info.pop(WITH_FIRST_READ, None)
        if with_read is not None:
            return with_read(sql, params)
    return run_on_driver(conn, sql, params, many=many)


def run_on_driver(conn: Connection, sql: str, params: Any, *, many: bool = False) -> Any:
    """`run`, on the DBAPI cursor whatever waits in a batched write."""
    driver = conn.connection.driver_connection
    assert driver is not None
    cursor = driver.cursor()
    try:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        cursor.close()
        # The values stay out of the error's text (`hide_parameters`, as the engines do),
        # which a log may print.
        error = conn.dialect.loaded_dbapi.Error
        raise sa_exc.DBAPIError.instance(sql, params, exc, error, hide_parameters=True) from exc
    return cursor


# The rows from which a held run of one INSERT goes as a COPY, on PostgreSQL.
COPY_FROM = 8

# The writes held back in this context (thread), if any: `held_writes`.
HELD: ContextVar[HeldWrites | None] = ContextVar("held_writes", default=None)


def row_key_of(statement: ClauseElement) -> tuple[str, ...] | None:
    """The names of the parameters that name the one row a write touches by its table's
    primary key: an INSERT of one row binding every key column, or an UPDATE or DELETE
    whose whole WHERE is `key column = parameter`. None for any other statement."""
    table = getattr(statement, "table", None)
    if not isinstance(table, Table):
        return None
    key = [column.name for column in table.primary_key.columns]
    if isinstance(statement, Insert):
        if statement.select is not None:
            return None
        bound = statement.compile().params
        return tuple(key) if all(name in bound for name in key) else None
    if isinstance(statement, Update | Delete) and len(key) == 1:
        where = statement.whereclause
        if (
            isinstance(where, BinaryExpression)
            and where.operator is operators.eq
            and where.left is table.c[key[0]]
            and isinstance(where.right, BindParameter)
        ):
            return (where.right.key,)
    return None


class TableWrites:
    """One table's held writes, in the order they must run.

    Writes that each name their row by the table's key (`row_key`) commute with the
    writes to other rows, and read no other row: each goes in the layer after the last
    write to its row, and a layer's writes run as one `executemany` per statement. So a
    page's INSERTs of new rows and UPDATEs of old ones make a handful of runs, however
    they interleave, and every row sees its writes in their order. Any other write (a
    DELETE by user, an INSERT ... SELECT) closes the layers so far and runs after them."""

    def __init__(self) -> None:
        # The runs closed so far, in order: (statement, its rows' driver values).
        self.runs: list[tuple[Compiled, list[Any]]] = []
        self.layers: list[dict[Compiled, list[Any]]] = []
        self.layer_of: dict[tuple[Any, ...], int] = {}

    def add(self, compiled: Compiled, values: Any) -> None:
        key = compiled.row_key(values)
        if key is None:
            if not self.layers and self.runs and self.runs[-1][0] is compiled:
                self.runs[-1][1].append(values)  # the same statement again, in its order
                return
            self.close()
            self.runs.append((compiled, [values]))
            return
        layer = self.layer_of.get(key, -1) + 1
        self.layer_of[key] = layer
        if layer == len(self.layers):
            self.layers.append({})
        rows = self.layers[layer].get(compiled)
        if rows is None:
            self.layers[layer][compiled] = [values]
        else:
            rows.append(values)

    def close(self) -> None:
        for layer in self.layers:
            self.runs.extend(layer.items())
        self.layers, self.layer_of = [], {}

    def ordered_runs(self) -> list[tuple[Compiled, list[Any]]]:
        self.close()
        return self.runs


class HeldWrites:
    """The writes of compiled statements on one connection, held back and run together:
    per table, grouped into few runs of one statement each (`TableWrites`), each run one
    `executemany`, and on PostgreSQL all of them in one pipeline (psycopg sends them
    without waiting for each answer). A projection of many events (a rebuild's page, an
    erasure batch) then costs a few round trips instead of one per row.

    Only a write that touches one table and reads no other is held (`holdable_in`):
    writes to different tables then commute (the read models have no foreign keys, no
    triggers). Anything else on the connection runs them first, so that it sees them: a
    compiled read or an unheld write, and every statement SQLAlchemy executes there (its
    `before_execute` event)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.by_table: dict[str, TableWrites] = {}

    def hold(self, table: str, compiled: Compiled, values: Any) -> None:
        """Hold a write to `table` (its statement's `holdable_in`) with its driver values."""
        writes = self.by_table.get(table)
        if writes is None:
            writes = self.by_table[table] = TableWrites()
        writes.add(compiled, values)

    def flush(self) -> None:
        """Run every held write."""
        if not self.by_table:
            return
        held, self.by_table = self.by_table, {}
        # In a batched write (postgres.py), what waits there goes first; the held runs
        # then go as `executemany`s, not one bound statement text per row.
        batch = self.conn.info.get(BATCH)
        if batch is not None:
            batch.send()
        driver = self.conn.connection.driver_connection
        # psycopg 3's pipeline mode and COPY (public APIs of its connection and cursor).
        pipeline = getattr(driver, "pipeline", None)
        dbapi = self.conn.dialect.loaded_dbapi
        supported = getattr(getattr(dbapi, "Pipeline", None), "is_supported", lambda: False)
        pipelined = pipeline is not None and supported()
        with ExitStack() as stack:
            in_pipeline = False
            for writes in held.values():
                for compiled, rows in writes.ordered_runs():
                    if compiled.copy_sql is not None and len(rows) >= COPY_FROM:
                        if in_pipeline:
                            # COPY cannot run in a pipeline: what was sent there goes first.
                            stack.close()
                            in_pipeline = False
                        self.copy(compiled, rows)
                        continue
                    if pipelined and pipeline is not None and not in_pipeline:
                        stack.enter_context(pipeline())
                        in_pipeline = True
                    run_on_driver(self.conn, compiled.sql, rows, many=True).close()

    def copy(self, compiled: Compiled, rows: Sequence[Any]) -> None:
        """A run of one INSERT (its values named after its columns) as one COPY (psycopg's
        `Cursor.copy`): the way PostgreSQL takes many new rows at once."""
        driver = self.conn.connection.driver_connection
        assert driver is not None and compiled.copy_sql is not None
        columns = compiled.copy_columns
        error = self.conn.dialect.loaded_dbapi.Error
        cursor = driver.cursor()
        try:
            with cursor.copy(compiled.copy_sql) as copy:
                for row in rows:
                    copy.write_row([row[name] for name in columns])
        except error as exc:
            raise sa_exc.DBAPIError.instance(compiled.copy_sql, None, exc, error) from exc
        finally:
            cursor.close()

    def before_execute(self, conn: Connection, *args: Any) -> None:
        self.flush()


def holding(conn: Connection) -> bool:
    """Whether the compiled writes on `conn` are held in this context."""
    held = HELD.get()
    return held is not None and held.conn is conn


def flush_held(conn: Connection) -> None:
    """Run the writes held on `conn` (if any): what comes next must see them."""
    held = HELD.get()
    if held is not None and held.conn is conn:
        held.flush()


@contextmanager
def held_writes(conn: Connection) -> Iterator[HeldWrites]:
    """Hold the compiled writes on `conn` in this block (see `HeldWrites`), and run them
    at its end. An error discards them: the caller's transaction is rolled back."""
    held = HeldWrites(conn)
    token = HELD.set(held)
    event.listen(conn, "before_execute", held.before_execute)
    try:
        yield held
        held.flush()
    finally:
        event.remove(conn, "before_execute", held.before_execute)
        HELD.reset(token)
