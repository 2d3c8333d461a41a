"""The webhook deliveries of a team's order events (`POST /v3/order/resend_events`): which
deliveries to queue again, by order and by when the event was recorded.

An order's events are its stream's, so a delivery of one has the order's id as its
`source_id`; the join on the `orders` read model keeps the team's live orders only (an
erased user's orders have no row, and their deliveries were dropped with the erasure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import orders, webhook_deliveries
from sqlalchemy import select


class OrderDeliveries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def of_orders(
        self,
        team_id: UUID,
        order_ids: Sequence[UUID] | None,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> dict[UUID, list[UUID]]:
        """Each order's deliveries (every endpoint's) of events recorded in
        [start_at, end_at), oldest first: the given orders, else all the team's."""
        d, o = webhook_deliveries.c, orders.c
        query = (
            select(d.source_id, d.delivery_id)
            .join(orders, o.order_id == d.source_id)
            .where(d.team_id == team_id, o.team_id == team_id)
            .order_by(d.source_timestamp, d.delivery_id)
        )
        if order_ids is not None:
            query = query.where(d.source_id.in_(order_ids))
        if start_at is not None:
            query = query.where(d.source_timestamp >= start_at)
        if end_at is not None:
            query = query.where(d.source_timestamp < end_at)
        found: dict[UUID, list[UUID]] = {}
        with self.db.read() as conn:
            for order_id, delivery_id in conn.execute(query):
                found.setdefault(order_id, []).append(delivery_id)
        return found
