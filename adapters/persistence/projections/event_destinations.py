"""The event destinations' read model (issue 35): which brokers a team environment has,
their routing tables and whether they publish. A deletion keeps the row, marked
(`deleted_at`), since the deliveries to it still name it (see the schema)."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import (
    event_destination_cursors,
    event_destinations,
)
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.teams.teams import Team
from healthledger.domain.webhooks.event_destinations import PAUSED_BY_CALLER, EventDestination
from healthledger.domain.webhooks.publish_rounds import PublishRound, tracking_name_of
from sqlalchemy import Connection, func, insert, update


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
    conn.execute(
        insert(event_destination_cursors).values(
            destination_id=e.originator_id,
            tracking_name=tracking_name_of(e.originator_id),
            rounds=0,
            acknowledged_past=[],
            attempts=0,
            next_attempt_at=e.timestamp,
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
    # Its cursor is due at once, not at its next retry (up to 10 h away after a
    # destination disabled for failing): the publisher claims by this row.
    c = event_destination_cursors.c
    conn.execute(
        update(event_destination_cursors)
        .where(c.destination_id == e.originator_id, c.next_attempt_at > e.timestamp)
        .values(next_attempt_at=e.timestamp)
    )


@handles(PublishRound.Started)
def round_started(conn: Connection, e: PublishRound.Started) -> None:
    c = event_destination_cursors.c
    conn.execute(
        update(event_destination_cursors)
        .where(c.destination_id == e.destination_id)
        .values(rounds=e.number)
    )


@handles(PublishRound.Finished)
def round_finished(conn: Connection, e: PublishRound.Finished) -> None:
    """A failure counts and keeps the first failure's time; a success clears both (the
    position is the round's tracking, saved with it)."""
    c = event_destination_cursors.c
    failed = e.error is not None
    conn.execute(
        update(event_destination_cursors)
        .where(c.destination_id == e.destination_id)
        .values(
            acknowledged_past=list(e.acknowledged_past),
            attempts=e.attempt if failed else 0,
            next_attempt_at=e.next_attempt_at or e.timestamp,
            failing_since=func.coalesce(c.failing_since, e.timestamp) if failed else None,
            last_error=e.error,
        )
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
