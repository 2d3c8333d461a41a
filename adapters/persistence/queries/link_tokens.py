"""The read side of link tokens: what the link page and `isValid` know about a token.

The row holds the token's redirect_url and its maker (`provider`, `filter_on_providers`)
only as the log does, sealed with the user's key (ADR 0032: teams put their own
identifiers of the person in the URL, and a maker is a health fact, a glucose monitor
says the person is diabetic); a read of a genuine token, found by its id, opens them with
that key, read on the read's own connection (the key store's `opener_on`). No read selects
tokens by their maker, so no keyed digest of it is kept."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import link_tokens, teams, users
from healthledger.adapters.persistence.eventstore.sealed_facts import opened_facts
from healthledger.adapters.persistence.queries.connection_facts import OpenerOn
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    link_token_expiry,
    link_token_problem,
)
from healthledger.domain.keys import key_matches, link_token_id
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import Connection, select


@dataclass(frozen=True)
class LinkTokenView:
    token_id: UUID
    team_id: UUID
    user_id: UUID
    environment: str
    provider: str | None
    redirect_url: str | None
    filter_on_providers: list[str] | None
    on_error: str | None
    on_close: str | None
    issued_at: datetime
    consumed_at: datetime | None
    # False once the user is deleted or erased, or the team deleted: the link is dead.
    usable_owner: bool
    team_name: str
    # The token's environment's settings of the team (logo, brand information).
    team_settings: dict[str, Any]

    @property
    def expires_at(self) -> datetime:
        return link_token_expiry(self.issued_at)

    def problem(self, now: datetime) -> str | None:
        """Why the token cannot be used at `now` (a link error type), or None."""
        if not self.usable_owner:
            return INVALID_TOKEN
        return link_token_problem(self.issued_at, self.consumed_at is not None, now)


class LinkTokenQueries:
    def __init__(self, db: Database, opener_on: OpenerOn) -> None:
        self.db = db
        self.opener_on = opener_on

    def genuine(self, plain: str) -> LinkTokenView | None:
        """The token whose text this is; None for a forged, unknown or malformed text."""
        token_id = link_token_id(plain)
        if token_id is None:
            return None
        t = link_tokens.c
        query = (
            select(
                link_tokens,
                users.c.status.label("user_status"),
                teams.c.name.label("team_name"),
                teams.c.settings.label("team_settings"),
                teams.c.deleted_at.label("team_deleted_at"),
            )
            # Outer joins: an erased user has no row left, and that must read as a dead
            # link rather than as an unknown token.
            .outerjoin(users, users.c.user_id == t.user_id)
            .outerjoin(teams, teams.c.team_id == t.team_id)
            .where(t.token_id == token_id)
        )
        with self.db.read() as conn:
            rows = conn.execute(query).all()
            if not rows or not key_matches(plain, rows[0].token_hash):
                return None
            row = rows[0]
            facts = self._facts(conn, row)
        return LinkTokenView(
            token_id=row.token_id,
            team_id=row.team_id,
            user_id=row.user_id,
            environment=row.environment,
            provider=facts.get("provider"),
            redirect_url=facts.get("redirect_url"),
            filter_on_providers=facts.get("filter_on_providers"),
            on_error=row.on_error,
            on_close=row.on_close,
            issued_at=row.issued_at,
            consumed_at=row.consumed_at,
            usable_owner=row.user_status == ACTIVE and row.team_deleted_at is None,
            team_name=row.team_name or "",
            team_settings=(row.team_settings or {}).get(row.environment) or {},
        )

    def _facts(self, conn: Connection, row: Any) -> dict[str, Any]:
        """The row's sealed facts opened with its user's key: its redirect_url, provider
        and filter_on_providers. Empty (each reads None) once the key is gone (a row is
        deleted with its user: only a read that races the erasure meets one), or for a
        row a rebuild made from an old version before the start's redaction."""
        sealed = row.sealed_facts
        if sealed is None or sealed == ERASED_PLACEHOLDER:
            return {}
        opener = self.opener_on(conn, {row.user_id})
        # As the log's mapper opens them.
        return opened_facts(opener(conn, row.user_id, sealed)) or {}
