"""The read side of webhooks: endpoint views for the management API, the endpoints an
event goes to (for the dispatcher; the deliveries due it claims through
`webhook_leases.py`), and the deprecation cut-overs already applied."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    deprecation_cut_overs,
    webhook_deliveries,
    webhook_endpoints,
)
from healthledger.adapters.persistence.queries.connection_facts import OpenerOn
from healthledger.adapters.persistence.queries.delivery_types import delivery_types
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.webhooks.deliveries import FAILED, PENDING
from healthledger.domain.webhooks.event_types import subscribed
from sqlalchemy import Connection, func, select

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
    def __init__(self, db: Database, opener_on: OpenerOn | None = None) -> None:
        self.db = db
        # Opens the deliveries' sealed types for the portal's pages (the key store's
        # `opener_on`); None: they read as the placeholder.
        self.opener_on = opener_on

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
        its streams), oldest first: endpoint, status, attempts, outcome, and the type
        only where it is in clear (`lifecycle_type`: a report reads them after the
        erasure, when no sealed type opens)."""
        d = webhook_deliveries.c
        if not delivery_ids:
            return []
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(
                        d.delivery_id,
                        d.endpoint_id,
                        d.lifecycle_type,
                        d.status,
                        d.attempts,
                        d.last_status_code,
                        d.succeeded_at,
                    )
                    .where(d.delivery_id.in_(sorted(delivery_ids)))
                    .order_by(d.created_at, d.delivery_id)
                ).all()
            )

    def latest_deliveries(self, endpoint_id: UUID, limit: int) -> list[Any]:
        """The endpoint's `limit` newest deliveries (by the event's time), newest first:
        what the webhook portal lists (ix_webhook_deliveries_endpoint)."""
        d = webhook_deliveries.c
        with self.db.read() as conn:
            return self._opened(
                conn,
                conn.execute(
                    select(
                        d.delivery_id,
                        d.sealed_facts,
                        d.lifecycle_type,
                        d.message_id,
                        d.user_id,
                        d.source_timestamp,
                        d.status,
                        d.attempts,
                        d.last_attempt_at,
                        d.last_status_code,
                        d.next_attempt_at,
                    )
                    .where(d.endpoint_id == endpoint_id)
                    .order_by(d.source_timestamp.desc(), d.delivery_id.desc())
                    .limit(limit)
                ).all(),
            )

    def delivery(self, delivery_id: UUID) -> Any | None:
        """One delivery's row: its endpoint and team (for a page to check), its message."""
        d = webhook_deliveries.c
        with self.db.read() as conn:
            row = conn.execute(
                select(
                    d.delivery_id,
                    d.endpoint_id,
                    d.team_id,
                    d.sealed_facts,
                    d.lifecycle_type,
                    d.message_id,
                    d.user_id,
                    d.source_timestamp,
                    d.status,
                    d.attempts,
                    d.next_attempt_at,
                ).where(d.delivery_id == delivery_id)
            ).first()
            return None if row is None else self._opened(conn, [row])[0]

    def _opened(self, conn: Connection, rows: Sequence[Any]) -> list[SimpleNamespace]:
        """Delivery rows with their `event_type` opened with their users' keys (ADR
        0028): the placeholder once a key is gone, or for a reader without keys."""
        types: Sequence[str | None] = [None] * len(rows)
        if self.opener_on is not None:
            types = delivery_types(conn, rows, self.opener_on)
        return [
            SimpleNamespace(**row._mapping, event_type=found or ERASED_PLACEHOLDER)
            for row, found in zip(rows, types, strict=True)
        ]

    def delivery_counts(self, endpoint_id: UUID | None = None) -> dict[str, int]:
        """Deliveries by status (all endpoints, or one)."""
        d = webhook_deliveries.c
        query = select(d.status, func.count()).group_by(d.status)
        if endpoint_id is not None:
            query = query.where(d.endpoint_id == endpoint_id)
        with self.db.read() as conn:
            return {status: count for status, count in conn.execute(query).all()}
