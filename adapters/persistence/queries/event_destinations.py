"""Reads of the event destinations' read model (issue 35)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import event_destinations
from sqlalchemy import select


class EventDestinationQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def ids(self, team_id: UUID, environment: str) -> list[UUID]:
        """The team environment's live destinations, oldest first."""
        c = event_destinations.c
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(c.destination_id)
                    .where(c.team_id == team_id, c.environment == environment)
                    .where(c.deleted_at.is_(None))
                    .order_by(c.created_on, c.destination_id)
                ).scalars()
            )

    def among(self, ids: Collection[UUID]) -> dict[UUID, dict[str, Any]]:
        """Which of these recipients of deliveries are event destinations (deleted ones
        too), each with its kind: the audit and the deletion report name them so."""
        if not ids:
            return {}
        c = event_destinations.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(c.destination_id, c.kind, c.deleted_at).where(
                    c.destination_id.in_(sorted(ids))
                )
            ).all()
        return {
            row.destination_id: {"kind": row.kind, "deleted": row.deleted_at is not None}
            for row in rows
        }
