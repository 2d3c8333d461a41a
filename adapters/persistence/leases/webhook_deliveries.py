"""Leases on webhook deliveries: a sender claims the due deliveries it is about to post,
so that several processes on one database never post the same delivery at once
(ADR 0019).

A claim is one short write transaction: select the due deliveries that hold no lease in
force (on PostgreSQL `FOR UPDATE ... SKIP LOCKED`, so that two senders claiming at the
same moment take different rows instead of queueing on the same ones), then insert a
lease for each, or take over one whose time has passed. The upsert is the arbiter: it
only replaces a lease that has expired, and only the rows it wrote come back. On SQLite
the write transaction is the only one in the database (BEGIN IMMEDIATE), which makes
the select and the upsert one step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    event_destinations,
    webhook_deliveries,
    webhook_delivery_leases,
)
from healthledger.domain.webhooks.deliveries import PENDING
from sqlalchemy import Column, Connection, Table, delete, exists, select
from sqlalchemy.dialects import postgresql, sqlite

Upsert = Callable[[Table], Any]


def take_leases(
    conn: Connection,
    upsert: Upsert,
    table: Table,
    key: Column[Any],
    ids: Sequence[UUID],
    holder: str,
    until: datetime,
    now: datetime,
) -> set[UUID]:
    """Lease each of `ids` (rows of `table` keyed by `key`) to `holder` until `until`,
    taking over a lease whose time has passed; the ids won. Another holder's lease in
    force stays theirs (it committed after this transaction's snapshot was taken)."""
    statement = upsert(table).values(
        [{key.name: i, "holder": holder, "expires_at": until} for i in ids]
    )
    return set(
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=[key],
                set_={"holder": holder, "expires_at": until},
                where=table.c.expires_at <= now,
            ).returning(key)
        ).scalars()
    )


def release_leases(db: Database, key: Column[Any], holder: str, ids: Collection[UUID]) -> None:
    """End `holder`'s leases on these ids (rows of `key`'s table). A lease taken over
    meanwhile by another holder is left alone."""
    if not ids:
        return
    table = key.table
    with db.write() as conn:
        conn.execute(delete(table).where(table.c.holder == holder, key.in_(sorted(ids))))


class DeliveryLeases:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._upsert = sqlite.insert if db.is_sqlite else postgresql.insert

    def claim_due(self, now: datetime, until: datetime, holder: str, limit: int) -> list[Any]:
        """The rows of up to `limit` due deliveries, each now leased to `holder` until
        `until`, in sending order (next attempt, then log position)."""
        d = webhook_deliveries.c
        lease = webhook_delivery_leases.c
        in_force = exists().where(lease.delivery_id == d.delivery_id, lease.expires_at > now)
        # Deliveries to an event destination (a broker) are the publisher's, not ours.
        to_broker = exists().where(event_destinations.c.destination_id == d.endpoint_id)
        due = (
            select(webhook_deliveries)
            .where(d.status == PENDING, d.next_attempt_at <= now, ~in_force, ~to_broker)
            .order_by(d.next_attempt_at, d.log_position, d.delivery_id)
            .limit(limit)
            # SQLite renders no FOR UPDATE: its writer holds the whole database.
            .with_for_update(skip_locked=True, of=webhook_deliveries)
        )
        with self.db.write() as conn:
            rows = conn.execute(due).all()
            if not rows:
                return []
            won = take_leases(
                conn,
                self._upsert,
                webhook_delivery_leases,
                lease.delivery_id,
                [row.delivery_id for row in rows],
                holder,
                until,
                now,
            )
        return [row for row in rows if row.delivery_id in won]

    def release(self, holder: str, delivery_ids: Collection[UUID]) -> None:
        """End `holder`'s leases on these deliveries (their attempts are recorded, or they
        were not posted). A lease taken over meanwhile by another sender is left alone."""
        release_leases(self.db, webhook_delivery_leases.c.delivery_id, holder, delivery_ids)

    def held(self) -> Sequence[Any]:
        """Every lease row (holder, delivery, expiry): for operators and tests."""
        lease = webhook_delivery_leases.c
        with self.db.read() as conn:
            return conn.execute(
                select(lease.delivery_id, lease.holder, lease.expires_at).order_by(lease.expires_at)
            ).all()
