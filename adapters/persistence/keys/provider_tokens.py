"""The maker's tokens of OAuth connections on SQL (the domain's ProviderTokenStore port):
one row per connection, the tokens sealed together under the user's data key (ADR 0022),
with the maker's slug and the OAuth client that obtained them (`sealed_grant`): a maker is
a health fact (freestyle_libre says the person is diabetic), and a client id names its
maker through the team's settings, so neither is held in clear (issue 29 §1, revision
0047). No read selects by them: a row is found by its connection or its due time.

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

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    provider_token_backfill,
    provider_tokens,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.health_data import UserDataGone
from healthledger.domain.connections.provider_tokens import GrantToKeep, ProviderTokens
from healthledger.domain.connections.revocation import OwedRevocation
from healthledger.domain.ledger import Clock
from sqlalchemy import ColumnElement, delete, insert, select, update
from sqlalchemy import Connection as SqlConnection

log = logging.getLogger("healthledger.provider_tokens")

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
        sealed = self.key_store.seal(
            grant.user_id, sealable_grant(grant.provider, grant.client_id, grant.tokens)
        )
        staged = self._staged()
        staged[connection_id] = {
            "connection_id": connection_id,
            "user_id": grant.user_id,
            "team_id": grant.team_id,
            "sealed_grant": sealed,
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
        opened = self._opened(row)
        if opened is None:
            return None
        return StoredGrant(
            connection_id=row.connection_id,
            user_id=row.user_id,
            team_id=row.team_id,
            provider=opened.provider,
            client_id=opened.client_id,
            tokens=opened.tokens,
            version=row.version,
        )

    def _opened(self, row: Any) -> OpenedGrant | None:
        return opened_grant(self.key_store.open(row.user_id, row.sealed_grant))

    def replace(self, stored: StoredGrant, tokens: ProviderTokens, now: datetime) -> bool:
        """Store refreshed tokens in place of `stored`, unless they moved on meanwhile (a
        refresh elsewhere, a new connection period, a deregistration): then False.
        Raises UserDataGone for an erased user."""
        cipher = self.key_store.cipher(stored.user_id)
        if cipher is None:
            raise UserDataGone()
        sealed = cipher.seal(sealable_grant(stored.provider, stored.client_id, tokens))
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
                    sealed_grant=sealed,
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
        return [self._owed(row) for row in claimed]

    def _owed(self, row: Any) -> OwedRevocation:
        # The user's key is there until its erasure, whose grace period outlasts the
        # attempts by far; once it is gone, nothing says which maker it was, and nothing
        # is left to revoke with (the job destroys the row without asking).
        opened = self._opened(row)
        return OwedRevocation(
            connection_id=row.connection_id,
            stored_at=row.stored_at,
            team_id=row.team_id,
            provider=None if opened is None else opened.provider,
            client_id=None if opened is None else opened.client_id,
            tokens=None if opened is None else opened.tokens,
            attempts=row.revoke_attempts,
        )

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


@dataclass(frozen=True)
class OpenedGrant:
    """What a row's `sealed_grant` holds, opened."""

    provider: str
    client_id: str
    tokens: ProviderTokens


def sealable_grant(provider: str, client_id: str, tokens: ProviderTokens) -> dict[str, Any]:
    """A connection's grant as one value to seal: its maker, the OAuth client that
    obtained it and the tokens."""
    return {"provider": provider, "client_id": client_id, "tokens": tokens.sealable()}


def opened_grant(opened: object) -> OpenedGrant | None:
    """The grant `sealable_grant` sealed, opened (None when the key is gone: the
    placeholder, or nothing)."""
    if not isinstance(opened, dict) or not isinstance(opened.get("tokens"), dict):
        return None
    return OpenedGrant(
        provider=opened["provider"],
        client_id=opened["client_id"],
        tokens=ProviderTokens.from_sealable(opened["tokens"]),
    )


def _period(owed: OwedRevocation) -> tuple[ColumnElement[bool], ...]:
    """The row of the ended period `owed` is about (never a later period's tokens)."""
    t = provider_tokens.c
    return (
        t.connection_id == owed.connection_id,
        t.stored_at == owed.stored_at,
        t.revoke_due_at.is_not(None),
    )


# Rows of before revision 0047 sealed a transaction (each opens and seals one grant).
SEALED_AT_ONCE = 200


def seal_stored_grants(db: Database, key_store: KeyStore) -> int:
    """The `provider_tokens` rows written before revision 0047 (their maker and OAuth
    client in clear; the migration moved both to `provider_token_backfill`, having no
    key): each sealed again with its maker and client (`sealable_grant`) under its user's
    key, or deleted if that key is gone (erased: nothing a key opens is kept), and
    unlisted, a batch a transaction (a start that stops halfway goes on at the next).
    Then both tables rewritten: on PostgreSQL the rows of before stay in the tables' files
    as dead versions, makers and all, until then (`Database.rewrite`); a start that
    stopped before the rewrite leaves empty tables with pages, rewritten at the next.
    The rows sealed or deleted; logs counts only."""
    t, b = provider_tokens.c, provider_token_backfill.c
    done = 0
    while True:
        with db.write() as conn:
            listed = conn.execute(
                select(b.connection_id, b.provider, b.client_id, t.user_id, t.sealed_grant)
                .select_from(
                    provider_token_backfill.outerjoin(
                        provider_tokens, t.connection_id == b.connection_id
                    )
                )
                .order_by(b.connection_id)
                .limit(SEALED_AT_ONCE)
            ).all()
            if not listed:
                break
            for row in listed:
                done += _seal_listed(conn, key_store, row)
            conn.execute(
                delete(provider_token_backfill).where(
                    b.connection_id.in_([row.connection_id for row in listed])
                )
            )
        log.info("provider tokens: %d rows of before revision 0047 sealed", done)
    if done or _has_pages(db):
        db.rewrite(provider_tokens.name, provider_token_backfill.name)
    return done


def _seal_listed(conn: SqlConnection, key_store: KeyStore, row: Any) -> int:
    """One listed row sealed with its maker and client (1), deleted (1), or gone (0)."""
    t = provider_tokens.c
    if row.user_id is None:
        return 0  # its row was deleted meanwhile (none is: the start runs first)
    mine = t.connection_id == row.connection_id
    cipher = key_store.cipher_on(conn, row.user_id)
    opened = None if cipher is None else cipher.open(row.sealed_grant)
    if cipher is None or not isinstance(opened, dict):
        return int(conn.execute(delete(provider_tokens).where(mine)).rowcount)
    if isinstance(opened.get("tokens"), dict):
        return 0  # sealed with its maker already
    tokens = ProviderTokens.from_sealable(opened)
    sealed = cipher.seal(sealable_grant(row.provider, row.client_id, tokens))
    changed = conn.execute(update(provider_tokens).where(mine).values(sealed_grant=sealed))
    return int(changed.rowcount)


def _has_pages(db: Database) -> bool:
    """Whether the (empty) backfill table still has pages on PostgreSQL: a start that
    stopped after unlisting and before the rewrite."""
    if db.is_sqlite:
        return False
    with db.read() as conn:
        size = conn.exec_driver_sql("SELECT pg_relation_size('provider_token_backfill')").scalar()
    return bool(size)
