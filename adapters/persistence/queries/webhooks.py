"""The read side of webhooks: endpoint views for the management API, the endpoints an
event goes to (for the dispatcher; the deliveries due it claims through
`webhook_leases.py`), and the deprecation cut-overs already applied."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    deprecation_cut_overs,
    webhook_deliveries,
    webhook_endpoints,
)
from healthledger.domain.webhooks.deliveries import FAILED, PENDING
from healthledger.domain.webhooks.event_types import subscribed
from sqlalchemy import func, select

# Every column but the sealed secrets: no view of an endpoint carries a secret.
_VIEW_COLUMNS = (
    webhook_endpoints.c.endpoint_id,
    webhook_endpoints.c.team_id,
    webhook_endpoints.c.environment,
    webhook_endpoints.c.url,
    webhook_endpoints.c.description,
    webhook_endpoints.c.filter_types,
    webhook_endpoints.c.disabled_reason,
    webhook_endpoints.c.created_on,
    webhook_endpoints.c.updated_at,
)


def _endpoint(row: Any) -> dict[str, Any]:
    return {
        "id": row.endpoint_id,
        "team_id": row.team_id,
        "environment": row.environment,
        "url": row.url,
        "description": row.description,
        "filter_types": list(row.filter_types),
        "disabled": row.disabled_reason is not None,
        "disabled_reason": row.disabled_reason,
        "created_on": row.created_on,
        "updated_at": row.updated_at,
    }


class WebhookQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def endpoints(self, team_id: UUID, environment: str) -> list[dict[str, Any]]:
        c = webhook_endpoints.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(*_VIEW_COLUMNS)
                .where(c.team_id == team_id, c.environment == environment)
                .order_by(c.created_on, c.endpoint_id)
            ).all()
        return [_endpoint(r) for r in rows]

    def endpoint(self, endpoint_id: UUID) -> dict[str, Any] | None:
        with self.db.read() as conn:
            row = conn.execute(
                select(*_VIEW_COLUMNS).where(webhook_endpoints.c.endpoint_id == endpoint_id)
            ).first()
        return None if row is None else _endpoint(row)

    def subscribed_endpoints(self, team_id: UUID, environment: str, event_type: str) -> list[UUID]:
        """The enabled endpoints of a team's environment whose filters take `event_type`."""
        return [
            endpoint_id
            for endpoint_id, filter_types in self.enabled_endpoints(team_id, environment)
            if subscribed(filter_types, event_type)
        ]

    def enabled_endpoints(self, team_id: UUID, environment: str) -> list[tuple[UUID, list[str]]]:
        """(endpoint id, filter types) of each enabled endpoint of a team's environment."""
        c = webhook_endpoints.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(c.endpoint_id, c.filter_types)
                .where(
                    c.team_id == team_id,
                    c.environment == environment,
                    c.disabled_reason.is_(None),
                )
                .order_by(c.created_on, c.endpoint_id)
            ).all()
        return [(r.endpoint_id, list(r.filter_types)) for r in rows]

    def applied_cut_overs(self) -> dict[str, datetime]:
        """Cut-over key -> when this deployment applied it."""
        c = deprecation_cut_overs.c
        with self.db.read() as conn:
            rows = conn.execute(select(c.key, c.applied_at)).all()
        return {r.key: r.applied_at for r in rows}

    # -- deliveries (for redelivery and the failing-too-long rule; the sender claims its
    # own: `webhook_leases.py`) ------------------------------------------------------------

    def failing_since(self, endpoint_id: UUID) -> datetime | None:
        """When the endpoint's oldest failure with no success after it happened."""
        d = webhook_deliveries.c
        with self.db.read() as conn:
            last_success = conn.execute(
                select(func.max(d.succeeded_at)).where(d.endpoint_id == endpoint_id)
            ).scalar()
            query = select(func.min(d.first_failure_at)).where(
                d.endpoint_id == endpoint_id, d.status.in_((PENDING, FAILED))
            )
            if last_success is not None:
                query = query.where(d.first_failure_at > last_success)
            return conn.execute(query).scalar()

    def deliveries_since(self, endpoint_id: UUID, since: datetime) -> list[UUID]:
        """The endpoint's deliveries of events recorded at or after `since`, oldest first."""
        d = webhook_deliveries.c
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(d.delivery_id)
                    .where(d.endpoint_id == endpoint_id, d.source_timestamp >= since)
                    .order_by(d.source_timestamp, d.delivery_id)
                ).scalars()
            )

    def deliveries(self, delivery_ids: Collection[UUID]) -> list[Any]:
        """These deliveries' rows (by primary key; a deletion report names a user's from
        its streams), oldest first: event type, endpoint, status, attempts, outcome."""
        d = webhook_deliveries.c
        if not delivery_ids:
            return []
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(
                        d.delivery_id,
                        d.endpoint_id,
                        d.event_type,
                        d.status,
                        d.attempts,
                        d.last_status_code,
                        d.succeeded_at,
                    )
                    .where(d.delivery_id.in_(sorted(delivery_ids)))
                    .order_by(d.created_at, d.delivery_id)
                ).all()
            )

    def delivery_counts(self, endpoint_id: UUID | None = None) -> dict[str, int]:
        """Deliveries by status (all endpoints, or one)."""
        d = webhook_deliveries.c
        query = select(d.status, func.count()).group_by(d.status)
        if endpoint_id is not None:
            query = query.where(d.endpoint_id == endpoint_id)
        with self.db.read() as conn:
            return {status: count for status, count in conn.execute(query).all()}
