"""The maker's tokens of OAuth connections on SQL (the domain's ProviderTokenStore port):
one row per connection, the tokens sealed together under the user's data key (ADR 0022).

A connect hands its tokens over with `kept_with`: they are sealed at once (outside any
transaction) and held for this thread until the save that records the connection runs
`record` in its transaction (the recorder's on_record), which writes them beside the
connection's events. So a connection made by OAuth never exists without its tokens, and
tokens never outlive a save that failed. They belong to one connection period: `record`
deletes a connection's tokens when it is connected again (with new ones or without), and
marks them owed a revocation when it is deregistered (`revoke_due_at`): from then on no
pull opens them (`current`), and the revocation job (domain/connections/revocation.py,
through `claim_due`, `retry_at`, `destroy`) deletes them once the maker revoked the grant
or the attempts are given up; the user's erasure deletes them in any case. A connection
made again before its revocation was done drops it: revoking the old grant then could
end the new one (a maker that revokes every grant of the person, as Fitbit does). It is
not a projection: a rebuild never runs it (a replayed deregistration must not touch the
tokens of the period that followed it).

A refresh replaces the tokens with `replace`, compared and set on `version`, so two
workers refreshing at once cannot overwrite each other's newer grant with an older one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import provider_tokens
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.health_data import UserDataGone
from healthledger.domain.connections.provider_tokens import GrantToKeep, ProviderTokens
from healthledger.domain.connections.revocation import OwedRevocation
from healthledger.domain.ledger import Clock
from sqlalchemy import ColumnElement, delete, insert, select, update
from sqlalchemy import Connection as SqlConnection

# The events that start a connection period, and the one that ends it.
_STARTS = frozenset({Connection.Created, Connection.Reconnected})
_ENDS = frozenset({Connection.Deregistered})
_WATCHED = _STARTS | _ENDS


@dataclass(frozen=True)
class StoredGrant:
    """A connection's tokens as stored, opened."""

    connection_id: UUID
    user_id: UUID
    team_id: UUID
    provider: str
    client_id: str
    tokens: ProviderTokens
    # What a refresh compares and sets.
    version: int


class SqlProviderTokenStore:
    def __init__(self, db: Database, key_store: KeyStore, clock: Clock) -> None:
        self.db = db
        self.key_store = key_store
        self.clock = clock
        # Per thread: the save that records the connection runs in the thread that
        # handed the tokens over (on_record runs inside the caller's save).
        self.local = threading.local()

    def _staged(self) -> dict[UUID, dict[str, Any]]:
        staged: dict[UUID, dict[str, Any]] | None = getattr(self.local, "staged", None)
        if staged is None:
            staged = self.local.staged = {}
        return staged

    # -- ProviderTokenStore ---------------------------------------------------------------

    @contextmanager
    def kept_with(self, connection_id: UUID, grant: GrantToKeep) -> Iterator[None]:
        # Sealed here, before the save's transaction: the writer lock is for SQL.
        sealed = self.key_store.seal(grant.user_id, grant.tokens.sealable())
        staged = self._staged()
        staged[connection_id] = {
            "connection_id": connection_id,
            "user_id": grant.user_id,
            "team_id": grant.team_id,
            "provider": grant.provider,
            "client_id": grant.client_id,
            "sealed_tokens": sealed,
            "expires_at": grant.tokens.expires_at,
            "version": 1,
            "stored_at": self.clock(),
            "refreshed_at": None,
        }
        try:
            yield
        finally:
            # Written by the save (record popped it), or dropped with the failed save.
            staged.pop(connection_id, None)

    # -- in the recording transaction (on_record) ------------------------------------------

    def record(self, conn: SqlConnection, events: Sequence[Any]) -> None:
        """Write the tokens handed over for connections these events start (deleting the
        previous period's), and mark the tokens of connections they end owed a revocation,
        due at once."""
        started: list[UUID] = []
        ended: dict[UUID, datetime] = {}
        rows: list[dict[str, Any]] = []
        for event in events:
            kind = type(event)
            if kind not in _WATCHED:
                continue  # nearly every event: one set lookup
            if kind in _ENDS:
                ended[event.originator_id] = event.timestamp
                continue
            started.append(event.originator_id)
            row = self._staged().pop(event.originator_id, None)
            if row is not None:
                rows.append(row)
        t = provider_tokens.c
        if started:
            conn.execute(delete(provider_tokens).where(t.connection_id.in_(started)))
        if rows:
            conn.execute(insert(provider_tokens), rows)
        for connection_id, at in ended.items():
            conn.execute(
                update(provider_tokens)
                .where(t.connection_id == connection_id, t.revoke_due_at.is_(None))
                .values(revoke_due_at=at, revoke_attempts=0)
            )

    # -- reads and refreshes ------------------------------------------------------------

    def current(self, connection_id: UUID) -> StoredGrant | None:
        """The connection's tokens, opened; None when it has none (or its user's key is
        destroyed: then they are gone in effect)."""
        t = provider_tokens.c
        with self.db.read() as conn:
            row = conn.execute(
                select(provider_tokens).where(
                    t.connection_id == connection_id, t.revoke_due_at.is_(None)
                )
            ).first()
        if row is None:
            return None
        tokens = self._opened(row)
        if tokens is None:
            return None
        return StoredGrant(
            connection_id=row.connection_id,
            user_id=row.user_id,
            team_id=row.team_id,
            provider=row.provider,
            client_id=row.client_id,
            tokens=tokens,
            version=row.version,
        )

    def _opened(self, row: Any) -> ProviderTokens | None:
        opened = self.key_store.open(row.user_id, row.sealed_tokens)
        return ProviderTokens.from_sealable(opened) if isinstance(opened, dict) else None

    def replace(self, stored: StoredGrant, tokens: ProviderTokens, now: datetime) -> bool:
        """Store refreshed tokens in place of `stored`, unless they moved on meanwhile (a
        refresh elsewhere, a new connection period, a deregistration): then False.
        Raises UserDataGone for an erased user."""
        cipher = self.key_store.cipher(stored.user_id)
        if cipher is None:
            raise UserDataGone()
        sealed = cipher.seal(tokens.sealable())
        t = provider_tokens.c
        with self.db.write() as conn:
            changed = conn.execute(
                update(provider_tokens)
                .where(
                    t.connection_id == stored.connection_id,
                    t.version == stored.version,
                    t.revoke_due_at.is_(None),
                )
                .values(
                    sealed_tokens=sealed,
                    expires_at=tokens.expires_at,
                    version=stored.version + 1,
                    refreshed_at=now,
                )
            ).rowcount
        return bool(changed == 1)

    # -- revocations owed (OwedRevocations, domain/connections/revocation.py) -------------

    def claim_due(self, now: datetime, lease: timedelta, limit: int) -> list[OwedRevocation]:
        """The ended periods' tokens due a revocation attempt, each claimed by moving its
        due time to the end of `lease` (compared and set: a worker of another process
        that read the same row claims none of it)."""
        t = provider_tokens.c
        claimed: list[Any] = []
        with self.db.write() as conn:
            rows = conn.execute(
                select(provider_tokens)
                .where(t.revoke_due_at <= now)
                .order_by(t.revoke_due_at)
                .limit(limit)
            ).all()
            for row in rows:
                taken = conn.execute(
                    update(provider_tokens)
                    .where(
                        t.connection_id == row.connection_id,
                        t.stored_at == row.stored_at,
                        t.revoke_due_at == row.revoke_due_at,
                    )
                    .values(revoke_due_at=now + lease)
                ).rowcount
                if taken == 1:
                    claimed.append(row)
        return [
            OwedRevocation(
                connection_id=row.connection_id,
                stored_at=row.stored_at,
                team_id=row.team_id,
                provider=row.provider,
                client_id=row.client_id,
                tokens=self._opened(row),
                attempts=row.revoke_attempts,
            )
            for row in claimed
        ]

    def retry_at(self, owed: OwedRevocation, attempts: int, due_at: datetime) -> None:
        with self.db.write() as conn:
            conn.execute(
                update(provider_tokens)
                .where(*_period(owed))
                .values(revoke_due_at=due_at, revoke_attempts=attempts)
            )

    def destroy(self, owed: OwedRevocation) -> None:
        with self.db.write() as conn:
            conn.execute(delete(provider_tokens).where(*_period(owed)))


def _period(owed: OwedRevocation) -> tuple[ColumnElement[bool], ...]:
    """The row of the ended period `owed` is about (never a later period's tokens)."""
    t = provider_tokens.c
    return (
        t.connection_id == owed.connection_id,
        t.stored_at == owed.stored_at,
        t.revoke_due_at.is_not(None),
    )
