"""The event destinations' read model (issue 35): which brokers a team environment has,
their routing tables and whether they publish. A deletion keeps the row, marked
(`deleted_at`), since the deliveries to it still name it (see the schema)."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import event_destinations, webhook_deliveries
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.teams.teams import Team
from healthledger.domain.webhooks.deliveries import PENDING
from healthledger.domain.webhooks.event_destinations import PAUSED_BY_CALLER, EventDestination
from sqlalchemy import Connection, insert, update


@handles(EventDestination.Created)
def destination_created(conn: Connection, e: EventDestination.Created) -> None:
    conn.execute(
        insert(event_destinations).values(
            destination_id=e.originator_id,
            team_id=e.team_id,
            environment=e.environment,
            kind=e.kind,
            routes=list(e.routes),
            paused_reason=PAUSED_BY_CALLER if e.paused else None,
            created_on=e.timestamp,
        )
    )


@handles(EventDestination.Updated)
def destination_updated(conn: Connection, e: EventDestination.Updated) -> None:
    if "routes" in e.changes:
        _update(conn, e, routes=list(e.changes["routes"]))


@handles(EventDestination.Paused, EventDestination.Disabled)
def destination_paused(
    conn: Connection, e: EventDestination.Paused | EventDestination.Disabled
) -> None:
    _update(conn, e, paused_reason=e.reason)


@handles(EventDestination.Resumed)
def destination_resumed(conn: Connection, e: EventDestination.Resumed) -> None:
    _update(conn, e, paused_reason=None)
    # Its kept messages are due at once, not at their next retry (up to 10 h away after a
    # destination disabled for failing): the publisher selects them by this row.
    d = webhook_deliveries.c
    conn.execute(
        update(webhook_deliveries)
        .where(d.endpoint_id == e.originator_id, d.status == PENDING)
        .where(d.next_attempt_at > e.timestamp)
        .values(next_attempt_at=e.timestamp)
    )


@handles(EventDestination.Deleted)
def destination_deleted(conn: Connection, e: EventDestination.Deleted) -> None:
    _update(conn, e, deleted_at=e.timestamp)


def team_deleted(conn: Connection, e: Team.Deleted) -> None:
    """A deleted team's destinations are deleted with it (called by the teams' handler:
    one handler per event class)."""
    conn.execute(
        update(event_destinations)
        .where(event_destinations.c.team_id == e.originator_id)
        .where(event_destinations.c.deleted_at.is_(None))
        .values(deleted_at=e.timestamp)
    )


def _update(conn: Connection, e: Any, **values: Any) -> None:
    conn.execute(
        update(event_destinations)
        .where(event_destinations.c.destination_id == e.originator_id)
        .values(**values)
    )
