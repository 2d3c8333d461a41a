"""The read side of provider connections (spec 2.2, and connected_sources of 2.3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import connections, users
from healthledger.adapters.persistence.engine.statements import CompiledStatement
from healthledger.adapters.persistence.queries.connection_facts import (
    OpenerOn,
    opened_connections,
)
from healthledger.domain.connections.connection import DEREGISTERED
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import bindparam, select

# slug -> {"name", "slug", "logo"}: the provider object of events and summaries (2.13).
DescribeProvider = Callable[[str], dict[str, Any]]

# The ids of a user's connections that are not deregistered (the parameter `user_id`).
LIVE_CONNECTIONS_OF_USER = select(connections.c.connection_id).where(
    connections.c.user_id == bindparam("user_id"), connections.c.status != DEREGISTERED
)
LIVE_CONNECTION_IDS = CompiledStatement(LIVE_CONNECTIONS_OF_USER)


class ConnectionQueries:
    def __init__(
        self,
        db: Database,
        vault: PersonalDataVault,
        describe: DescribeProvider,
        opener_on: OpenerOn,
    ) -> None:
        self.db = db
        self.vault = vault
        self.describe = describe
        # Opens the rows' sealed providers and availabilities (ADR 0032).
        self.opener_on = opener_on

    def live_connection_ids(self, user_id: UUID) -> list[UUID]:
        # Every user deletion asks this.
        with self.db.read() as conn:
            return [row[0] for row in LIVE_CONNECTION_IDS.rows(conn, {"user_id": user_id})]

    def providers_of(self, user_id: UUID) -> list[dict[str, Any]]:
        """Spec 2.2 items for the user's connections that are not deregistered."""
        return self.provider_items(self._live_rows([user_id]))

    def provider_items(self, rows: Iterable[Any]) -> list[dict[str, Any]]:
        """Spec 2.2 items of connection rows (the read model's, or a connection as of an
        instant: `adapters/compliance/time_travel.py`)."""
        return [
            {
                **self.describe(r.provider),
                "status": r.status,
                "created_on": r.created_on,
                "resource_availability": r.resource_availability,
                "error_details": r.error_details,
                "external_user_id": (
                    None
                    if r.sealed_external_user_id is None
                    else self.vault.open(r.user_id, r.sealed_external_user_id)
                ),
            }
            for r in rows
        ]

    def connected_sources(self, user_ids: Iterable[UUID]) -> dict[UUID, list[dict[str, Any]]]:
        """Spec 2.3 `connected_sources`, with the client's `provider`, for each user, in
        one query for a whole page."""
        return self.sources_by_user(self._live_rows(list(user_ids)))

    def sources_by_user(self, rows: Iterable[Any]) -> dict[UUID, list[dict[str, Any]]]:
        """Each user's `connected_sources` from connection rows (as `provider_items`)."""
        by_user: dict[UUID, list[dict[str, Any]]] = {}
        for r in rows:
            described = self.describe(r.provider)
            provider = {"logo": described["logo"], "name": described["name"], "slug": r.provider}
            # `provider` is what the official client reads; `source`, the spec's, is its
            # deprecated duplicate (docs/compatibility.md).
            by_user.setdefault(r.user_id, []).append(
                {"created_on": r.created_on, "provider": provider, "source": dict(provider)}
            )
        return by_user

    def gone_users_with_live_connections(self) -> list[UUID]:
        """Users deleted or erased whose connection a racing connect left live."""
        c = connections.c
        active = select(users.c.user_id).where(
            users.c.user_id == c.user_id, users.c.status == ACTIVE
        )
        with self.db.read() as conn:
            return list(
                conn.execute(
                    select(c.user_id).where(c.status != DEREGISTERED, ~active.exists()).distinct()
                ).scalars()
            )

    def _live_rows(self, user_ids: list[UUID]) -> list[Any]:
        if not user_ids:
            return []
        c = connections.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(connections).where(c.user_id.in_(user_ids), c.status != DEREGISTERED)
            ).all()
            found = opened_connections(conn, rows, self.opener_on)
        # Ordered once opened: the provider is sealed in the row.
        return sorted(found, key=lambda r: (r.user_id, r.created_on, r.provider))
