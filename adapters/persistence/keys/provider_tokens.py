"""The maker's tokens of OAuth connections on SQL (the domain's ProviderTokenStore port):
one row per connection, the tokens sealed together under the user's data key (ADR 0022).

A connect hands its tokens over with `kept_with`: they are sealed at once (outside any
transaction) and held for this thread until the save that records the connection runs
`record` in its transaction (the recorder's on_record), which writes them beside the
connection's events. So a connection made by OAuth never exists without its tokens, and
tokens never outlive a save that failed. `record` also deletes a connection's tokens
when it is deregistered, or connected again without new ones: they belong to one
connection period. It is not a projection: a rebuild never runs it (a replayed
deregistration must not delete the tokens of the period that followed it).

A refresh replaces the tokens with `replace`, compared and set on `version`, so two
workers refreshing at once cannot overwrite each other's newer grant with an older one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import provider_tokens
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.health_data import UserDataGone
from healthledger.domain.connections.provider_tokens import GrantToKeep, ProviderTokens
from healthledger.domain.ledger import Clock
from sqlalchemy import Connection as SqlConnection
from sqlalchemy import delete, insert, select, update

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
        """Write the tokens handed over for connections these events start, and delete
        the tokens of connections they end or start again without new ones."""
        touched: list[UUID] = []
        rows: list[dict[str, Any]] = []
        for event in events:
            kind = type(event)
            if kind not in _WATCHED:
                continue  # nearly every event: one set lookup
            touched.append(event.originator_id)
            if kind in _STARTS:
                row = self._staged().pop(event.originator_id, None)
                if row is not None:
                    rows.append(row)
        if touched:
            conn.execute(
                delete(provider_tokens).where(provider_tokens.c.connection_id.in_(touched))
            )
        if rows:
            conn.execute(insert(provider_tokens), rows)

    # -- reads and refreshes ------------------------------------------------------------

    def current(self, connection_id: UUID) -> StoredGrant | None:
        """The connection's tokens, opened; None when it has none (or its user's key is
        destroyed: then they are gone in effect)."""
        with self.db.read() as conn:
            row = conn.execute(
                select(provider_tokens).where(provider_tokens.c.connection_id == connection_id)
            ).first()
        if row is None:
            return None
        opened = self.key_store.open(row.user_id, row.sealed_tokens)
        if not isinstance(opened, dict):
            return None
        return StoredGrant(
            connection_id=row.connection_id,
            user_id=row.user_id,
            team_id=row.team_id,
            provider=row.provider,
            client_id=row.client_id,
            tokens=ProviderTokens.from_sealable(opened),
            version=row.version,
        )

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
                .where(t.connection_id == stored.connection_id, t.version == stored.version)
                .values(
                    sealed_tokens=sealed,
                    expires_at=tokens.expires_at,
                    version=stored.version + 1,
                    refreshed_at=now,
                )
            ).rowcount
        return bool(changed == 1)
