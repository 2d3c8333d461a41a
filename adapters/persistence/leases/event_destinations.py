"""Leases on event destinations (issue 35, ADR 0035): a publisher claims a destination
before it publishes its queue, so that several processes on one database publish each
message once per destination, and a user's messages in the order of the log.

The claim is per destination, not per delivery (as the webhooks' is, ADR 0019): a broker
keeps what it is given in the order it is given, so one publisher at a time per
destination is what keeps a user's messages in order when two processes run. The claim
is the webhooks' arbiter (`take_leases`): an upsert that only replaces an expired lease.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    event_destination_leases,
    event_destinations,
    webhook_deliveries,
)
from healthledger.adapters.persistence.leases.webhook_deliveries import (
    release_leases,
    take_leases,
)
from healthledger.domain.webhooks.deliveries import PENDING
from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite


class DestinationLeases:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._upsert = sqlite.insert if db.is_sqlite else postgresql.insert

    def claim(self, now: datetime, until: datetime, holder: str, limit: int) -> list[UUID]:
        """Up to `limit` destinations with a message due, each now leased to `holder`
        until `until`. A paused destination is left alone (its messages wait); a deleted
        one is claimed, so that its publisher drops what it had queued."""
        dest = event_destinations.c
        d = webhook_deliveries.c
        lease = event_destination_leases.c
        due = exists().where(
            d.endpoint_id == dest.destination_id, d.status == PENDING, d.next_attempt_at <= now
        )
        in_force = exists().where(
            lease.destination_id == dest.destination_id, lease.expires_at > now
        )
        query = (
            select(dest.destination_id)
            .where(or_(dest.paused_reason.is_(None), dest.deleted_at.is_not(None)))
            .where(due, ~in_force)
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

    def queue(self, destination_id: UUID, now: datetime, limit: int) -> Sequence[Any]:
        """The destination's next deliveries to publish, in order (log position, then
        message id within one logged event), without any that would overtake an earlier
        message of the same user still waiting for its retry: a user's messages reach the
        broker in the order of the log, whatever failed on the way. Each row has the
        columns the publisher reads (`QUEUE_COLUMNS`).

        Whether any user's message waits for a retry is asked first (the queue's index
        answers it): when none does (a broker that has not failed), the due rows are read
        as they are. Otherwise each user's first waiting message is found once (two
        small aggregates over the destination's waiting rows) and joined to the due ones;
        a correlated NOT EXISTS per due row read the earlier pending rows again for each,
        quadratic in the queue (135 ms for a queue of 1,000 on SQLite: issue 35's
        publishing rate)."""
        d = webhook_deliveries.c
        waiting = webhook_deliveries.alias("waiting")
        w = waiting.c
        is_waiting = and_(
            w.endpoint_id == destination_id, w.status == PENDING, w.next_attempt_at > now
        )
        query = (
            select(*(d[name] for name in QUEUE_COLUMNS))
            .where(d.endpoint_id == destination_id, d.status == PENDING)
            .where(d.next_attempt_at <= now)
            .order_by(d.log_position, d.message_id)
            .limit(limit)
        )
        with self.db.read() as conn:
            if conn.execute(select(w.delivery_id).where(is_waiting).limit(1)).first() is None:
                return conn.execute(query).all()
            # Per user: the log position of its first waiting message, then the least
            # message id among its waiting ones at that position.
            first_position = (
                select(w.user_id, func.min(w.log_position).label("position"))
                .where(is_waiting)
                .group_by(w.user_id)
                .subquery("first_position")
            )
            p = first_position.c
            first = (
                select(w.user_id, w.log_position, func.min(w.message_id).label("message_id"))
                .join(
                    first_position,
                    and_(p.user_id == w.user_id, p.position == w.log_position),
                )
                .where(is_waiting)
                .group_by(w.user_id, w.log_position)
                .subquery("first_waiting")
            )
            f = first.c
            query = query.outerjoin(first, f.user_id == d.user_id).where(
                or_(
                    f.user_id.is_(None),
                    d.log_position < f.log_position,
                    and_(d.log_position == f.log_position, d.message_id < f.message_id),
                )
            )
            return conn.execute(query).all()


# What the publisher reads of a queued delivery: its identity and lane, its sealed type,
# what its body is built from (`Payloads.of_delivery`), its place in the log.
QUEUE_COLUMNS = (
    "delivery_id",
    "endpoint_id",
    "team_id",
    "user_id",
    "sealed_facts",
    "lifecycle_type",
    "message_id",
    "source_id",
    "source_version",
    "day",
    "log_position",
)
