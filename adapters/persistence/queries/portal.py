"""What the hosted portal reads about a pass's holder before it shows anything: the user
(live or not, in which team and environment), the team (its name, brand settings,
closed-beta switches), and whether the user was deleted after the pass was issued. One read
transaction, from the `users` and `teams` read models and the event log's timestamp index
(a deletion that was undone since leaves no trace in the read models).

And the owner of an order a portal URL opens on. The orders themselves are
`OrderQueries`' (`orders_of_user`, `order`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import orders, stored_events, teams, users
from healthledger.domain.context import DEFAULT_ENVIRONMENT
from healthledger.domain.users.user import ACTIVE, User
from sqlalchemy import select


@dataclass(frozen=True)
class PortalHolder:
    """A pass's user, as the portal needs it."""

    # The user's team: a pass names the team it was issued in, and must match.
    team_id: UUID
    # Active, in a team that is not deleted.
    live: bool
    deleted_since_issue: bool
    team_name: str
    # The team's settings of the user's environment (brand information, logo).
    team_settings: dict[str, Any]
    features: frozenset[str]


class PortalQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def holder(self, user_id: UUID, issued_at: datetime) -> PortalHolder | None:
        """The user of a pass issued at `issued_at`; None when there is no such user
        (never was, or erased: erasure deletes the row)."""
        u, t, e = users.c, teams.c, stored_events.c
        found = (
            select(u.team_id, u.status, u.environment, t.name, t.settings, t.features, t.deleted_at)
            .join(teams, t.team_id == u.team_id)
            .where(u.user_id == user_id)
        )
        # The user's stream by time: ix_stored_events_originator_time.
        deleted = (
            select(e.originator_version)
            .where(
                e.originator_id == user_id,
                e.timestamp > issued_at,
                e.topic == User.Deleted.TOPIC,
            )
            .limit(1)
        )
        with self.db.read() as conn:
            row = conn.execute(found).first()
            if row is None:
                return None
            deleted_since = conn.execute(deleted).first() is not None
        settings = row.settings or {}
        return PortalHolder(
            team_id=row.team_id,
            live=row.status == ACTIVE and row.deleted_at is None,
            deleted_since_issue=deleted_since,
            team_name=row.name,
            team_settings=settings.get(row.environment or DEFAULT_ENVIRONMENT) or {},
            features=frozenset(row.features or ()),
        )

    def order_owner(self, team_id: UUID, order_id: UUID) -> UUID | None:
        """The user a team's order is for (None: the team has no such order)."""
        o = orders.c
        query = select(o.user_id).where(o.order_id == order_id, o.team_id == team_id)
        with self.db.read() as conn:
            owner: UUID | None = conn.execute(query).scalar()
        return owner
