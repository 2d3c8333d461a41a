"""Leases on event destinations (issue 35, ADR 0035): a publisher claims a destination
before it publishes a round of it, so that several processes on one database publish each
message once per destination, and a user's messages in the order of the log.

The claim is per destination (a broker keeps what it is given in the order it is given,
so one publisher at a time per destination keeps a user's messages in order when two
processes run), of the destinations whose cursor (ADR 0055) is behind the log and due.
The claim is the webhooks' arbiter (`take_leases`): an upsert that only replaces an
expired lease.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    event_destination_cursors,
    event_destination_leases,
    event_destinations,
    stored_events,
    tracking,
    webhook_deliveries,
)
from healthledger.adapters.persistence.leases.webhook_deliveries import (
    release_leases,
    take_leases,
)
from healthledger.domain.webhooks.deliveries import PENDING
from sqlalchemy import exists, func, select
from sqlalchemy.dialects import postgresql, sqlite


class DestinationLeases:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._upsert = sqlite.insert if db.is_sqlite else postgresql.insert

    def claim(
        self, now: datetime, until: datetime, holder: str, limit: int, last: int
    ) -> list[UUID]:
        """Up to `limit` destinations whose cursor is behind `last` (the log's last
        position) and due, each now leased to `holder` until `until`. A paused, disabled
        or deleted destination is left alone: its cursor waits."""
        dest = event_destinations.c
        cursor = event_destination_cursors.c
        lease = event_destination_leases.c
        t = tracking.c
        in_force = exists().where(
            lease.destination_id == dest.destination_id, lease.expires_at > now
        )
        caught_up = exists().where(
            t.application_name == cursor.tracking_name, t.notification_id >= last
        )
        query = (
            select(dest.destination_id)
            .join(event_destination_cursors, cursor.destination_id == dest.destination_id)
            .where(dest.paused_reason.is_(None), dest.deleted_at.is_(None))
            .where(cursor.next_attempt_at <= now)
            .where(~caught_up, ~in_force)
            .order_by(dest.created_on, dest.destination_id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=event_destinations)
        )
        with self.db.write() as conn:
            ids = list(conn.execute(query).scalars())
            if not ids:
                return []
            won = take_leases(
                conn,
                self._upsert,
                event_destination_leases,
                lease.destination_id,
                ids,
                holder,
                until,
                now,
            )
        return [i for i in ids if i in won]

    def release(self, holder: str, destination_ids: Collection[UUID]) -> None:
        release_leases(self.db, event_destination_leases.c.destination_id, holder, destination_ids)

    def cursor(self, destination_id: UUID) -> Any:
        """The destination's cursor row (`event_destination_cursors`), or None."""
        c = event_destination_cursors.c
        with self.db.read() as conn:
            return conn.execute(
                select(event_destination_cursors).where(c.destination_id == destination_id)
            ).first()

    def queued_deliveries(self, limit: int) -> list[Any]:
        """Deliveries to event destinations still pending, recorded before their cursors
        (revision 0051, ADR 0055): the start drops them, superseded."""
        d = webhook_deliveries.c
        dest = event_destinations.c
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(d.delivery_id, d.user_id)
                    .join(event_destinations, dest.destination_id == d.endpoint_id)
                    .where(d.status == PENDING)
                    .order_by(d.delivery_id)
                    .limit(limit)
                ).all()
            )

    def position(self, destination_id: UUID, tracking_name: str) -> int:
        """Where the destination's cursor is in the log: its tracking, else the log
        position of its creation (what was announced before it is not its to publish)."""
        t = tracking.c
        e = stored_events.c
        with self.db.read() as conn:
            found = conn.execute(
                select(func.max(t.notification_id)).where(t.application_name == tracking_name)
            ).scalar()
            if found is None:
                found = conn.execute(
                    select(e.notification_id).where(
                        e.originator_id == destination_id, e.originator_version == 1
                    )
                ).scalar()
        return int(found or 0)
