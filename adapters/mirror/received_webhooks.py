"""The receiver's record of the webhook messages it has taken (`received_webhooks`).

Applied messages get their row from the mirror recorder's `on_record`, in the transaction
that stores the mirror's events, taking the message id from the events. Messages of a type
the receiver does not know get their row alone. Either way the primary key refuses a second
copy, and with it the copy's whole transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.mirror_schema import received_webhooks
from sqlalchemy import Connection, insert, select
from sqlalchemy import exc as sa_exc

APPLIED = "applied"
RECEIVED = "received"


@dataclass(frozen=True)
class ReceivedWebhook:
    message_id: str
    event_type: str
    user_id: UUID
    outcome: str  # APPLIED or RECEIVED
    received_at: datetime


class ReceivedWebhooks:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record_applied(self, conn: Connection, events: Sequence[Any]) -> None:
        """`on_record` of the mirror recorder: one row per message among `events`."""
        rows: dict[str, dict[str, Any]] = {}
        for event in events:
            message_id = getattr(event, "message_id", None)
            if message_id is not None and message_id not in rows:
                rows[message_id] = {
                    "message_id": message_id,
                    "event_type": event.event_type,
                    "user_id": event.originator_id,
                    "outcome": APPLIED,
                    "received_at": event.timestamp,
                }
        if rows:
            conn.execute(insert(received_webhooks), list(rows.values()))

    def record_received(
        self, message_id: str, event_type: str, user_id: UUID, now: datetime
    ) -> bool:
        """Keep a message that changes nothing else; False if it was taken before."""
        try:
            with self.db.write() as conn:
                conn.execute(
                    insert(received_webhooks).values(
                        message_id=message_id,
                        event_type=event_type,
                        user_id=user_id,
                        outcome=RECEIVED,
                        received_at=now,
                    )
                )
        except sa_exc.IntegrityError:
            return False
        return True

    def was_received(self, message_id: str) -> bool:
        return self.get(message_id) is not None

    def get(self, message_id: str) -> ReceivedWebhook | None:
        c = received_webhooks.c
        with self.db.read() as conn:
            row = conn.execute(
                select(c.message_id, c.event_type, c.user_id, c.outcome, c.received_at).where(
                    c.message_id == message_id
                )
            ).first()
        return None if row is None else ReceivedWebhook(*row)

    def for_user(self, user_id: UUID) -> list[ReceivedWebhook]:
        """Every message taken about a user, oldest first."""
        c = received_webhooks.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(c.message_id, c.event_type, c.user_id, c.outcome, c.received_at)
                .where(c.user_id == user_id)
                .order_by(c.received_at, c.message_id)
            ).all()
        return [ReceivedWebhook(*row) for row in rows]

    def user_ids(self) -> list[UUID]:
        """Every user a message was taken about (applied or not)."""
        c = received_webhooks.c
        with self.db.read() as conn:
            return list(conn.execute(select(c.user_id).distinct().order_by(c.user_id)).scalars())
