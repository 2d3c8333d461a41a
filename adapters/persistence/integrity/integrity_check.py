"""The checks the scheduler runs daily (scheduler/integrity.py), run here: the chain walked
with its signed heads and the head file's (`healthledger verify --anchors`), and the read
models compared with the log (`healthledger verify --read-models`). The first problem is
named by kind and place only: a chain problem by its kind, position, stream id and
version; a read model's by its table, what differs and the columns, never a row's key or
values (a key may be a secret's digest, a value personal data).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, Mapper
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.eventstore.chain import Chain, describe
from healthledger.adapters.persistence.integrity.read_model_check import (
    DIFFERS,
    EXTRA,
    MISSING,
    CheckRefused,
    RowDifference,
    check_read_models,
)
from healthledger.adapters.persistence.keys.head_anchors import AnchorFileError, read_anchors
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.domain.integrity import IntegrityCheck, IntegrityFindings
from sqlalchemy import func, select


def run_integrity_checks(
    chain: Chain,
    anchor_file: Path | None,
    read_models: ReadModels,
    recorder: ApplicationRecorder,
    mapper: Mapper[Any],
) -> IntegrityFindings:
    """Both checks, whatever the first found; the first problem is the chain's if any."""
    problems: list[str] = []
    anchored = None
    if anchor_file is not None and anchor_file.exists():
        try:
            anchored = read_anchors(anchor_file)
        except AnchorFileError as exc:
            problems.append(f"head file: {exc}")
    walked = chain.verify(None, anchored)
    if walked.problem is not None:
        problems.append(f"chain: {describe(walked.problem)}")
    rows, differing = 0, None
    try:
        compared = check_read_models(read_models, recorder, mapper)
    except CheckRefused as exc:
        problems.append(f"read models not checked: {exc}")
    except Exception as exc:
        # A log the rebuild cannot read (an event changed past decoding): the type only,
        # since a message may quote stored values.
        problems.append(f"read models not checked: the log's rebuild failed ({type(exc).__name__})")
    else:
        rows, differing = compared.rows_compared, len(compared.differences)
        if compared.differences:
            first = compared.differences[0]
            tables = len({d.table for d in compared.differences})
            problems.append(
                f"read models: {_what(first)} ({differing} row(s) differ in {tables} table(s))"
            )
    return IntegrityFindings(
        records_checked=walked.records_checked,
        signed_heads_checked=walked.signed_heads_checked,
        anchored_heads_checked=walked.anchored_heads_checked,
        read_model_rows_compared=rows,
        read_model_differences=differing,
        first_problem=problems[0] if problems else None,
    )


def _what(difference: RowDifference) -> str:
    """A row's difference without its key or values."""
    table = difference.table
    if difference.kind == MISSING:
        return f"a row of {table} made by the log is missing from the live table"
    if difference.kind == EXTRA:
        return f"a row of {table} in the live table is not made by the log"
    assert difference.kind == DIFFERS
    return f"a row of {table} differs from the log's in {', '.join(difference.columns)}"


def last_integrity_check_at(db: Database) -> datetime | None:
    """When the latest check was recorded (by any process), from the log."""
    e = stored_events.c
    with db.read() as conn:
        found: datetime | None = conn.execute(
            select(func.max(e.timestamp)).where(e.topic == IntegrityCheck.Created.TOPIC)
        ).scalar()
    return found


class LatestCheck:
    """`last_integrity_check_at`, asked of the log only when its answer could make a check
    due: the log has no index on topic, so each question reads the whole event table,
    and the job looks hourly. A check seen at T makes none due before T + interval (a
    later one, by any process, only moves that on), so until then the one seen is the
    answer: about one read of the log per interval instead of one an hour."""

    def __init__(self, db: Database, clock: Callable[[], datetime], interval: timedelta) -> None:
        self.db = db
        self.clock = clock
        self.interval = interval
        self.seen: datetime | None = None

    def __call__(self) -> datetime | None:
        if self.seen is None or self.clock() >= self.seen + self.interval:
            self.seen = last_integrity_check_at(self.db)
        return self.seen
