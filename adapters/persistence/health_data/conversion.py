"""Stored days of revisions before 0021 (one sealed base64 text of canonical JSON per
day, `health_data_days`) converted into blocks (ADR 0033), at the service's start.

Resumable: each block's days are written into it and deleted in one transaction, so a
start that stops halfway leaves whole periods converted and the rest as they were, and
the next start goes on. Each block is checked as it is written: every day opens to the
JSON it was stored as, byte for byte (`blocks.encode(check=True)`). Progress is logged
(counts only: no user, provider or resource).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data_days
from healthledger.adapters.persistence.health_data.blocks import StoredPayload, period_of
from healthledger.adapters.persistence.health_data.store import SqlHealthDataStore
from sqlalchemy import delete, func, select, text

log = logging.getLogger("healthledger.health_data")
_d = health_data_days.c

Progress = Callable[[int, int], None]

# PostgreSQL: the old table's size on disk (0 once rewritten empty, or never written).
_PAGES = text(f"SELECT pg_relation_size('{health_data_days.name}')")


def _logged(done: int, total: int) -> None:
    log.info("health data: %d of %d stored days converted into blocks", done, total)


def convert_stored_days(store: SqlHealthDataStore, progress: Progress = _logged) -> int:
    """Every stored day of the old format written into its block; the days converted
    (none on an up-to-date database: one read). Then the old table rewritten: on
    PostgreSQL its deleted rows, provider and resource in clear, stay in its files as
    dead versions until then (`Database.rewrite`); an empty table that still has pages
    (a start stopped before the rewrite) is rewritten too."""
    db: Database = store.db
    with db.read() as conn:
        total = conn.execute(select(func.count()).select_from(health_data_days)).scalar_one()
        streams = conn.execute(select(_d.user_id, _d.provider, _d.resource).distinct()).all()
        left_on_disk = not total and not db.is_sqlite and conn.execute(_PAGES).scalar_one()
    if not total:
        if left_on_disk:
            db.rewrite(health_data_days.name)
        return 0
    done = 0
    for user_id, provider, resource in streams:
        with db.read() as conn:
            days = conn.execute(
                select(_d.day).where(
                    _d.user_id == user_id, _d.provider == provider, _d.resource == resource
                )
            ).scalars()
            by_period = sorted({period_of(day) for day in days})
        for period in by_period:
            done += _convert_period(store, user_id, provider, resource, period)
            progress(done, total)
    if done:
        db.rewrite(health_data_days.name)
    return done


def _convert_period(
    store: SqlHealthDataStore, user_id: UUID, provider: str, resource: str, period: date
) -> int:
    next_period = date(period.year + period.month // 12, period.month % 12 + 1, 1)
    this = (
        (_d.user_id == user_id)
        & (_d.provider == provider)
        & (_d.resource == resource)
        & (_d.day >= period)
        & (_d.day < next_period)
    )
    query = select(_d.day, _d.sealed, _d.digest, _d.stored_at, _d.updated_at).where(this)
    if not store.db.is_sqlite:
        # Processes starting together: the first converts the period, the others wait
        # on its rows and then find them gone (SQLite's writer lock orders them alike).
        query = query.with_for_update()
    with store.db.write() as conn:
        rows = conn.execute(query).all()
        cipher = store.key_store.cipher_on(conn, user_id)
        if cipher is not None and rows:
            days: dict[date, Any] = {
                row.day: StoredPayload(
                    json.loads(cipher.open_bytes(row.sealed)),
                    row.stored_at,
                    row.updated_at,
                    row.digest,
                )
                for row in rows
            }
            store.absorb(conn, cipher, user_id, provider, resource, period, days)
        # A user erased meanwhile left rows no key opens: they go too.
        conn.execute(delete(health_data_days).where(this))
    return len(rows)
