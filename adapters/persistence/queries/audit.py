"""The read side of a user's audit: the team of a user in any state, and the events of
every stream the user owns, merged in time order, by index lookups only (the user's rows
of `stream_owners` by its primary key, then each stream's events by
`ix_stored_events_originator_time`): never a scan of the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import stored_events, stream_owners
from healthledger.adapters.persistence.projections.stream_owners import USER
from sqlalchemy import Select, and_, or_, select

# Where an event stands in a user's audit: its time, then its place in the log (the
# events of one save share a time).
Position = tuple[datetime, int]


@dataclass(frozen=True)
class OwnedEvent:
    """A stored event of a stream the user owns, with the stream's kind and the event's
    position."""

    kind: str
    stored: StoredEvent
    position: Position


class AuditQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def user_team(self, user_id: UUID) -> UUID | None:
        """The team of a user, live, pending or erased (None: no such user)."""
        o = stream_owners.c
        with self.db.read() as conn:
            found: UUID | None = conn.execute(
                select(o.team_id).where(
                    o.user_id == user_id, o.originator_id == user_id, o.kind == USER
                )
            ).scalar()
            return found

    def owned_events(
        self,
        user_id: UUID,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        topics: Sequence[str] = (),
        after: Position | None = None,
        limit: int = 500,
    ) -> list[OwnedEvent]:
        """The events of the user's streams at or after `start` and before `end`, of
        `topics` (all when empty), after the position `after`, in time order."""
        query = owned_events_query(user_id, start, end, topics, after).limit(limit)
        with self.db.read() as conn:
            return [
                OwnedEvent(
                    kind=row.kind,
                    stored=StoredEvent(
                        originator_id=row.originator_id,
                        originator_version=row.originator_version,
                        topic=row.topic,
                        state=bytes(row.state),
                    ),
                    position=(row.timestamp, row.notification_id),
                )
                for row in conn.execute(query)
            ]


def owned_events_query(
    user_id: UUID,
    start: datetime | None,
    end: datetime | None,
    topics: Sequence[str],
    after: Position | None,
) -> Select[tuple[object, ...]]:
    o, e = stream_owners.c, stored_events.c
    query = (
        select(
            o.kind,
            e.notification_id,
            e.originator_id,
            e.originator_version,
            e.topic,
            e.state,
            e.timestamp,
        )
        .select_from(stream_owners.join(stored_events, e.originator_id == o.originator_id))
        .where(o.user_id == user_id)
    )
    if start is not None:
        query = query.where(e.timestamp >= start)
    if end is not None:
        query = query.where(e.timestamp < end)
    if topics:
        query = query.where(e.topic.in_(sorted(set(topics))))
    if after is not None:
        at, notification_id = after
        query = query.where(
            or_(e.timestamp > at, and_(e.timestamp == at, e.notification_id > notification_id))
        )
    return query.order_by(e.timestamp, e.notification_id)
