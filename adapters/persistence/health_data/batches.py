"""A user's stored health data read in bulk, for the aggregate query: the live user
checked, then one resource's blocks streamed and opened, all in one read transaction (so
the user, the key and the data are of one moment).

A block at a time keeps memory bounded: its columns are dropped once the engine has
taken them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from itertools import chain
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, users
from healthledger.adapters.persistence.health_data.blocks import Block
from healthledger.adapters.persistence.health_data.places import Named, Places
from healthledger.adapters.persistence.health_data.store import (
    current_blocks,
    open_block,
    versions_of_then,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.users.user import ACTIVE, PENDING_ERASURE
from sqlalchemy import Connection, select


class UserHealthData:
    """One live user's data, in the read transaction that found the user (as it was at
    `as_of`, when given)."""

    def __init__(
        self,
        conn: Connection,
        cipher: UserCipher | None,
        user_id: UUID,
        as_of: datetime | None = None,
    ) -> None:
        self.conn = conn
        self.cipher = cipher
        self.user_id = user_id
        self.as_of = as_of

    def blocks(
        self, resource: str, first: date, last: date, keys: Collection[str]
    ) -> Iterator[tuple[str, Block]]:
        """The resource's blocks holding a day of first..last (inclusive), every
        provider's, each opened (of its items' keys, `keys` only) and cut to those days,
        with its provider."""
        if self.cipher is None:
            return  # a user with no key has stored nothing
        # The rows' provider and resource are keyed digests (ADR 0047).
        places = Places(self.cipher.digest)
        if self.as_of is not None:
            # The versions of then (`store.versions_of_then`), of each its days stored by
            # then: a debugging read, its rows fetched at once.
            rows = places.named(
                self.conn.execute(
                    current_blocks(
                        self.user_id, places, first, last, resources=[resource], as_of=self.as_of
                    )
                )
            )
            for row in versions_of_then(rows):
                opened = open_block(self.cipher, row, keys, (first, last))
                yield row.provider, opened.stored_by(self.as_of)
            return
        query = (
            current_blocks(self.user_id, places, first, last, resources=[resource])
            # By period, then provider: the providers by name, as before their digests.
            .order_by(health_data.c.period)
            # Streamed (a server-side cursor on PostgreSQL), not fetched whole.
            .execution_options(yield_per=4)
        )
        period: Any = None
        held: list[Named] = []
        for row in chain(self.conn.execute(query), [None]):
            if held and (row is None or row.period != period):
                for named in sorted(held, key=lambda n: n.provider):
                    yield named.provider, open_block(self.cipher, named, keys, (first, last))
                held = []
            if row is None:
                break
            period = row.period
            named_row = places.name(row)
            if named_row is not None:
                held.append(named_row)


class HealthDataBatches:
    def __init__(self, db: Database, key_store: KeyStore) -> None:
        self.db = db
        self.key_store = key_store

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """One read transaction. PostgreSQL's readers run in autocommit (no transaction:
        each statement its own snapshot, and no server-side cursor); this read needs
        one snapshot for the user, its key and its data, and a cursor to stream them."""
        if self.db.is_sqlite:
            with self.db.read() as conn:
                yield conn
            return
        with self.db.writer.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            with conn.begin():
                yield conn

    @contextmanager
    def live_user(
        self, team_id: UUID, user_id: UUID, as_of: datetime | None = None
    ) -> Iterator[UserHealthData]:
        """The team's live user's data (as it was at `as_of`, when given); UserNotFound
        (unknown, another team's, erased, made after `as_of`) or UserScheduledForDeletion
        otherwise: both 404."""
        with self._snapshot() as conn:
            found = conn.execute(
                select(users.c.status, users.c.created_on).where(
                    users.c.user_id == user_id, users.c.team_id == team_id
                )
            ).first()
            status = None if found is None else found.status
            if status == PENDING_ERASURE:
                raise UserScheduledForDeletion()
            if found is None or status != ACTIVE:
                raise UserNotFound()
            if as_of is not None and found.created_on > as_of:
                raise UserNotFound()
            cipher = self.key_store.cipher_on(conn, user_id)
            yield UserHealthData(conn, cipher, user_id, as_of)
