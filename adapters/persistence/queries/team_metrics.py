"""A team's metrics (`GET /v2/user/metrics`, the official clients' `user.get_team_metrics`;
issue 34): how many users, connections (by provider and by state), pulls by state, lab
orders and webhook deliveries by state, counted in SQL from the read models, one query
each, and nothing personal: counts only.

Connections' providers are sealed per user (ADR 0032): they are counted by the team's keyed
provider digest, and a digest is named by the catalog slug whose digest it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    connections,
    orders,
    resource_feeds,
    users,
    webhook_deliveries,
    webhook_endpoints,
)
from healthledger.domain.connections.connection import CONNECTED, DEREGISTERED, ERROR
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import func, select

# Weeks of `number_of_connected_sources_by_week`, the newest last.
WEEKS = 12


class TeamMetrics:
    def __init__(self, db: Database, provider_digest: Callable[[UUID, str], str]) -> None:
        self.db = db
        self.provider_digest = provider_digest

    def of(self, team_id: UUID, now: datetime, providers: Iterable[str]) -> dict[str, Any]:
        u, c, f, o = users.c, connections.c, resource_feeds.c, orders.c
        d, e = webhook_deliveries.c, webhook_endpoints.c
        live_users = select(u.user_id).where(u.team_id == team_id, u.status == ACTIVE)
        live = c.user_id.in_(live_users)
        week_starts = _week_starts(now)
        with self.db.read() as conn:
            user_count = conn.execute(
                select(func.count()).where(u.team_id == team_id, u.status == ACTIVE)
            ).scalar_one()
            by_status: dict[str, int] = dict(
                conn.execute(
                    select(c.status, func.count())
                    .where(c.team_id == team_id, live)
                    .group_by(c.status)
                ).all()
            )
            by_digest: dict[str | None, int] = dict(
                conn.execute(
                    select(c.provider_digest, func.count())
                    .where(c.team_id == team_id, live, c.status != DEREGISTERED)
                    .group_by(c.provider_digest)
                ).all()
            )
            # The weeks' connections, and how many came before them: not every row's time.
            made = (c.team_id == team_id, live, c.status != DEREGISTERED)
            earlier = conn.execute(
                select(func.count()).where(*made, c.created_on < week_starts[0])
            ).scalar_one()
            created = list(
                conn.execute(
                    select(c.created_on).where(*made, c.created_on >= week_starts[0])
                ).scalars()
            )
            pulls: dict[str | None, int] = dict(
                conn.execute(
                    select(f.status, func.count())
                    .where(f.team_id == team_id, f.user_id.in_(live_users))
                    .group_by(f.status)
                ).all()
            )
            ordered = conn.execute(select(func.count()).where(o.team_id == team_id)).scalar_one()
            endpoints = select(e.endpoint_id).where(e.team_id == team_id)
            deliveries: dict[str, int] = dict(
                conn.execute(
                    select(d.status, func.count())
                    .where(d.team_id == team_id, d.endpoint_id.in_(endpoints))
                    .group_by(d.status)
                ).all()
            )
        named = {self.provider_digest(team_id, slug): slug for slug in providers}
        return {
            "team_id": team_id,
            "number_of_users": user_count,
            "number_of_connected_sources": by_status.get(CONNECTED, 0),
            "number_of_errored_connected_sources": by_status.get(ERROR, 0),
            "number_of_connected_sources_by_week": [
                {
                    "date": start,
                    "value": sum(start <= at < start + timedelta(weeks=1) for at in created),
                    "all": earlier + sum(at < start + timedelta(weeks=1) for at in created),
                }
                for start in week_starts
            ],
            "number_of_ordered_tests": ordered,
            # Ours besides the client's: the breakdowns a team asks about.
            "connections_by_status": by_status,
            "connections_by_provider": {
                named[digest]: count
                for digest, count in sorted(by_digest.items(), key=lambda item: str(item[0]))
                if digest in named
            },
            "pulls_by_status": {str(status): count for status, count in pulls.items()},
            "webhook_deliveries_by_status": deliveries,
        }


def _week_starts(now: datetime) -> list[datetime]:
    """The Mondays (00:00 UTC) of the last WEEKS weeks, this one last."""
    this_week = (now - timedelta(days=now.weekday())).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    return [this_week - timedelta(weeks=n) for n in range(WEEKS - 1, -1, -1)]
