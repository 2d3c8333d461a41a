"""The read side of pulls: what the workers must do next, and the introspection views."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import connections, resource_feeds, users
from healthledger.adapters.persistence.queries.connection_facts import (
    OpenerOn,
    opened_connections,
    opened_feeds,
)
from healthledger.domain.connections.connection import CONNECTED, DEREGISTERED, PAUSED
from healthledger.domain.connections.resource_feeds import IN_PROGRESS, RETRYING, SCHEDULED, SUCCESS
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import and_, func, or_, select


class PullQueries:
    def __init__(
        self,
        db: Database,
        lease: timedelta,
        opener_on: OpenerOn,
        provider_digest: Callable[[UUID, str], str],
    ) -> None:
        self.db = db
        self.lease = lease
        # The feeds' and connections' providers and resources are sealed (ADR 0032):
        # opened with the users' keys, and filtered by the team's keyed digest.
        self.opener_on = opener_on
        self.provider_digest = provider_digest

    # -- for the workers ------------------------------------------------------------------

    def due_pulls(self, now: datetime, limit: int) -> list[UUID]:
        """Pulls to run: scheduled or retrying and due, or running past their lease."""
        f = resource_feeds.c
        query = (
            select(f.feed_id)
            .where(
                or_(
                    and_(f.status.in_((SCHEDULED, RETRYING)), f.due_at <= now),
                    and_(f.status == IN_PROGRESS, f.last_attempt_at <= now - self.lease),
                )
            )
            .order_by(f.due_at, f.feed_id)
            .limit(limit)
        )
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def due_syncs(self, synced_before: datetime, limit: int) -> list[UUID]:
        """Feeds whose pull succeeded and that were last synced before the instant, of
        connections that are connected (not in error, paused or deregistered)."""
        f, c = resource_feeds.c, connections.c
        query = (
            select(f.feed_id)
            .join(connections, c.connection_id == f.connection_id)
            .where(f.status == SUCCESS, f.synced_at <= synced_before, c.status == CONNECTED)
            .order_by(f.synced_at, f.feed_id)
            .limit(limit)
        )
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def ingestion_bound_changes(self, today: date) -> list[UUID]:
        """Connections to pause (their user's ingestion_end has passed) or to resume (paused,
        and the user's ingestion_end was cleared or moved on)."""
        c, u = connections.c, users.c
        ended = and_(u.ingestion_end.is_not(None), u.ingestion_end < today)
        query = (
            select(c.connection_id)
            .join(users, u.user_id == c.user_id)
            .where(
                u.status == ACTIVE,
                or_(and_(c.status == CONNECTED, ended), and_(c.status == PAUSED, ~ended)),
            )
        )
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def pending_count(self) -> int:
        """Pulls not ended yet (scheduled, in progress or retrying)."""
        f = resource_feeds.c
        query = select(func.count()).where(f.status.in_((SCHEDULED, IN_PROGRESS, RETRYING)))
        with self.db.read() as conn:
            return conn.execute(query).scalar_one()

    # -- introspection --------------------------------------------------------------------

    def user_page(
        self,
        team_id: UUID,
        *,
        user_id: UUID | None,
        provider: str | None,
        after: UUID | None,
        limit: int,
    ) -> list[UUID]:
        """Live users of the team with a live connection (to `provider` if given), by id."""
        c, u = connections.c, users.c
        query = (
            select(c.user_id)
            .join(users, u.user_id == c.user_id)
            .where(c.team_id == team_id, c.status != DEREGISTERED, u.status == ACTIVE)
            .group_by(c.user_id)
            .order_by(c.user_id)
            .limit(limit)
        )
        if user_id is not None:
            query = query.where(c.user_id == user_id)
        if provider is not None:
            query = query.where(c.provider_digest == self.provider_digest(team_id, provider))
        if after is not None:
            query = query.where(c.user_id > after)
        with self.db.read() as conn:
            return list(conn.execute(query).scalars())

    def feeds_of(self, user_ids: Sequence[UUID], provider: str | None) -> list[Any]:
        """The feeds of the users' live connections, with the connection's status."""
        if not user_ids:
            return []
        f, c = resource_feeds.c, connections.c
        query = (
            select(resource_feeds, c.status.label("connection_status"))
            .join(connections, c.connection_id == f.connection_id)
            .where(f.user_id.in_(list(user_ids)), c.status != DEREGISTERED)
        )
        with self.db.read() as conn:
            found = opened_feeds(conn, conn.execute(query).all(), self.opener_on)
        # Filtered and ordered once opened (a page's users' feeds).
        return sorted(
            (f for f in found if provider is None or f.provider == provider),
            key=lambda f: (f.user_id, f.provider, f.resource),
        )

    def live_providers_of(self, user_ids: Sequence[UUID], provider: str | None) -> list[Any]:
        """(user_id, provider, resource_availability) of each live connection, by user and
        provider (the order of each user's `provider` object in the answer)."""
        if not user_ids:
            return []
        c = connections.c
        query = select(c.user_id, c.sealed_facts, c.sealed_availability).where(
            c.user_id.in_(list(user_ids)), c.status != DEREGISTERED
        )
        with self.db.read() as conn:
            found = opened_connections(conn, conn.execute(query).all(), self.opener_on)
        return sorted(
            (r for r in found if provider is None or r.provider == provider),
            key=lambda r: (r.user_id, r.provider),
        )
