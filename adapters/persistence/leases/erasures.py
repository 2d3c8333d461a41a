"""Claims on due erasures: how the erasure sweeps of several processes share the work
(ADR 0021).

A sweeper claims a batch of due users in a short transaction of its own: it sets their
`pending_erasures.claimed_until`, choosing rows nobody holds (`FOR UPDATE SKIP LOCKED` on
PostgreSQL: a row another sweeper is claiming is skipped, not waited for; SQLite has one
writer). The erasure deletes the rows. A claim's time passes if its sweeper died; a
sweeper that could not erase its batch gives the claims back at once. Claims only share
the work: exactly-once comes from the event store (one Erased event per user wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import pending_erasures
from healthledger.adapters.persistence.engine.statements import among
from sqlalchemy import or_, select, update


class ErasureClaims:
    def __init__(self, db: Database, lease: timedelta) -> None:
        self.db = db
        self.lease = lease

    def claim(self, now: datetime, limit: int) -> list[UUID]:
        """Claim up to `limit` users whose grace period ended by `now` and whom no other
        sweeper holds, the longest due first; their ids."""
        p = pending_erasures.c
        due = (
            select(p.user_id)
            .where(p.due_at <= now, or_(p.claimed_until.is_(None), p.claimed_until <= now))
            .order_by(p.due_at, p.user_id)
            .limit(limit)
        )
        if not self.db.is_sqlite:
            due = due.with_for_update(skip_locked=True)
        claiming = (
            update(pending_erasures)
            .where(p.user_id.in_(due.scalar_subquery()))
            .values(claimed_until=now + self.lease)
            .returning(p.user_id)
        )
        with self.db.write() as conn:
            return list(conn.execute(claiming).scalars())

    def release(self, user_ids: Sequence[UUID]) -> None:
        """Give back the claims on these users (the rows of those erased are gone)."""
        if not user_ids:
            return
        p = pending_erasures.c
        with self.db.write() as conn:
            postgres = conn.dialect.name == "postgresql"
            conn.execute(
                update(pending_erasures)
                .where(among(p.user_id, "ids", postgres=postgres))
                .values(claimed_until=None),
                {"ids": list(user_ids)},
            )
