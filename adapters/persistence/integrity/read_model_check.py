"""`healthledger verify --read-models`: the read models rebuilt from the log into a
scratch copy and compared, row by row, with the live ones (issue 30 §3).

The chain proves the log; the read models are what the service acts on (the erasure sweep
reads `pending_erasures`), and whoever holds the database can change them without touching
the log. The check builds every read model again from the whole log with the rebuild's
machinery (`projections/rebuild.py`: the same shadow, the same handlers), projects the
events written meanwhile under the log's write lock, and compares the shadow's tables with
the live ones in that same transaction, so both stand at one position of the log. Then the
shadow is dropped: nothing live is changed.

Each row is named by its table and primary key: `missing` (the log makes it, the live
table lacks it), `extra` (the live table holds it, the log does not make it) or
`differs` (both hold it, with other values; the columns are named).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, Mapper
from healthledger.adapters.persistence.engine.schema import READ_MODEL_TABLES
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.adapters.persistence.projections.rebuild import (
    BATCH_EVENTS,
    COMMIT_EVENTS,
    PageProjector,
    PostgresShadow,
    Shadow,
    SqliteShadow,
    commit_pages,
    quoted,
    shadow_of,
    unfinished_rebuild,
)
from sqlalchemy import Connection, Table

MISSING = "missing"
EXTRA = "extra"
DIFFERS = "differs"


class CheckRefused(RuntimeError):
    pass


@dataclass(frozen=True)
class RowDifference:
    table: str
    # The row's primary key, column by column.
    key: dict[str, Any]
    kind: str
    # For DIFFERS: the columns whose values differ.
    columns: tuple[str, ...] = ()

    def describe(self) -> str:
        key = ", ".join(f"{name}={value}" for name, value in self.key.items())
        if self.kind == MISSING:
            return f"{self.table} ({key}): made by the log, missing from the live table"
        if self.kind == EXTRA:
            return f"{self.table} ({key}): in the live table, not made by the log"
        return f"{self.table} ({key}): differs from the log's in {', '.join(self.columns)}"


@dataclass(frozen=True)
class ReadModelCheck:
    events: int
    rows_compared: int
    differences: list[RowDifference]


def check_read_models(
    read_models: ReadModels,
    recorder: ApplicationRecorder,
    mapper: Mapper[Any],
    *,
    progress: Callable[[int], None] = lambda n: None,
    batch_events: int = BATCH_EVENTS,
) -> ReadModelCheck:
    """Rebuild every read model into the shadow and compare (see the module's docstring).
    CheckRefused while an unfinished `rebuild` left its shadow (this check would drop it)."""
    db = read_models.db
    if unfinished_rebuild(db) is not None:
        raise CheckRefused(
            "an unfinished `healthledger rebuild` left its shadow tables: run `healthledger "
            "rebuild` to finish it (or `rebuild --restart`) before checking the read models"
        )
    shadow = shadow_of(db)
    try:
        projector = PageProjector(read_models, recorder, mapper)
        with shadow.engine().connect() as conn:
            shadow.create(conn)
            position, events = 0, 0
            while True:
                position, taken = commit_pages(
                    conn, projector, position, batch_events, COMMIT_EVENTS
                )
                if not taken:
                    break
                events += taken
                progress(taken)
            # The events written meanwhile, and the comparison, under the log's write lock.
            with shadow.swapping(conn, recorder):
                while (page := projector.read(position, batch_events)) is not None:
                    projector.project(conn, page.events)
                    position, events = page.last, events + page.size
                    progress(page.size)
                compared, differences = 0, []
                for table in READ_MODEL_TABLES:
                    rows, found = _compare(conn, shadow, table)
                    compared += rows
                    differences.extend(found)
    finally:
        shadow.discard()
        shadow.dispose()
    return ReadModelCheck(events, compared, differences)


def _names(shadow: Shadow, table: Table) -> tuple[str, str]:
    """The shadow's table and the live one, qualified."""
    name = quoted(table.name)
    if isinstance(shadow, SqliteShadow):
        return f"main.{name}", f"{shadow.LIVE}.{name}"
    assert isinstance(shadow, PostgresShadow)
    return f"{quoted(shadow.schema)}.{name}", f"{quoted(shadow.live)}.{name}"


def _compare(conn: Connection, shadow: Shadow, table: Table) -> tuple[int, list[RowDifference]]:
    columns = [c.name for c in table.columns]
    key = [c.name for c in table.primary_key.columns] or columns
    rebuilt_name, live_name = _names(shadow, table)
    selected = ", ".join(quoted(c) for c in columns)
    rebuilt = _keyed(conn, f"SELECT {selected} FROM {rebuilt_name}", columns, key)
    live = _keyed(conn, f"SELECT {selected} FROM {live_name}", columns, key)
    found: list[RowDifference] = []
    for k in sorted(rebuilt.keys() | live.keys(), key=repr):
        named = dict(zip(key, k, strict=True))
        if k not in live:
            found.append(RowDifference(table.name, named, MISSING))
        elif k not in rebuilt:
            found.append(RowDifference(table.name, named, EXTRA))
        elif rebuilt[k] != live[k]:
            changed = tuple(c for c in columns if rebuilt[k][c] != live[k][c])
            found.append(RowDifference(table.name, named, DIFFERS, changed))
    return max(len(rebuilt), len(live)), found


def _keyed(
    conn: Connection, sql: str, columns: Sequence[str], key: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in conn.exec_driver_sql(sql):
        values = dict(zip(columns, row, strict=True))
        rows[tuple(values[k] for k in key)] = values
    return rows
