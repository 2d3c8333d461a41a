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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, Insert, Table, bindparam, insert
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql import ClauseElement
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


class Compiled:
    """A statement compiled for one dialect."""

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler), "a Core statement compiles to SQL"
        self.sql = compiled.string
        params = compiled.params
        # Values the statement binds itself (the OFFSET 0 SQLite adds to a LIMIT...).
        self.defaults = {name: value for name, value in params.items() if value is not None}
        # Positional drivers (sqlite3): the parameters' names in the statement's order.
        self.positions: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        names = self.positions if self.positions is not None else tuple(params)
        self.processors: dict[str, Processor | None] = {
            name: compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in names
        }
        self.plan = [(name, self.processors[name]) for name in self.positions or ()]
        # The columns a SELECT (or an INSERT ... RETURNING) answers, each value converted
        # back by its type's own processor.
        self.result_processors: list[Processor | None] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in getattr(statement, "exported_columns", ())
        ]

    def row_parameters(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """What a positional driver binds for `values` given in the statement's parameter
        order (`positions`), for a statement that binds no values of its own."""
        if self.positions is None or self.defaults:
            raise TypeError("values in order are for positional statements with no defaults")
        if len(values) != len(self.plan):
            raise ValueError(f"{len(values)} values for {len(self.plan)} parameters")
        return tuple(
            [
                value if processor is None or value is None else processor(value)
                for value, (_, processor) in zip(values, self.plan, strict=True)
            ]
        )

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """What the driver binds for `values` (keyed by parameter name)."""
        if self.defaults:
            values = {**self.defaults, **values}
        if self.positions is not None:
            row = []
            for name, processor in self.plan:
                value = values[name]
                row.append(value if processor is None or value is None else processor(value))
            return tuple(row)
        processors = self.processors
        return {
            name: (
                value
                if value is None or (processor := processors.get(name)) is None
                else processor(value)
            )
            for name, value in values.items()
        }


class CompiledStatement:
    """A Core statement, compiled at its first use on each kind of database."""

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        # Per (dialect name, driver, paramstyle): the statement compiled for it.
        self.by_dialect: dict[tuple[str, str, str], Compiled] = {}

    def compiled(self, dialect: Dialect) -> Compiled:
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        found = self.by_dialect.get(key)
        if found is None:
            found = self.by_dialect[key] = Compiled(self.statement, dialect)
        return found

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> int | None:
        """Run once with `values`; the id of the row it inserted, where the driver
        reports one (sqlite3's `lastrowid`)."""
        compiled = self.compiled(conn.dialect)
        cursor = run(conn, compiled.sql, compiled.parameters(values))
        try:
            return getattr(cursor, "lastrowid", None)
        finally:
            cursor.close()

    def execute_row(self, conn: Connection, values: Sequence[Any]) -> int | None:
        """`execute`, with the values in the statement's parameter order (a positional
        driver's: see `Compiled.row_parameters`)."""
        compiled = self.compiled(conn.dialect)
        cursor = run(conn, compiled.sql, compiled.row_parameters(values))
        try:
            return getattr(cursor, "lastrowid", None)
        finally:
            cursor.close()

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run a SELECT; its rows, each value converted as SQLAlchemy converts it."""
        compiled = self.compiled(conn.dialect)
        processors = compiled.result_processors
        cursor = run(conn, compiled.sql, compiled.parameters(values))
        try:
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        return [
            tuple(
                value if processor is None or value is None else processor(value)
                for processor, value in zip(processors, row, strict=True)
            )
            for row in fetched
        ]

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run once per row (the driver's executemany)."""
        if rows:
            compiled = self.compiled(conn.dialect)
            params = [compiled.parameters(row) for row in rows]
            run(conn, compiled.sql, params, many=True).close()


def run(conn: Connection, sql: str, params: Any, *, many: bool = False) -> Any:
    """Run `sql` on the connection's DBAPI cursor: in whatever transaction SQLAlchemy
    began on that connection, or in none (a single read runs in the driver's autocommit).
    A driver error is raised as the SQLAlchemy error it would have been."""
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
        raise sa_exc.DBAPIError.instance(sql, params, exc, conn.dialect.loaded_dbapi.Error) from exc
    return cursor
