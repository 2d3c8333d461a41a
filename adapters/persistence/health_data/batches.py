"""A user's stored health data read in bulk, for the aggregate query: the live user
checked, then one resource's days streamed in batches and opened, all in one read
transaction (so the user, the key and the data are of one moment).

Batches keep memory bounded: a year of minute samples is a few hundred megabytes of
ciphertext and JSON, and a batch's are dropped once the engine has taken its columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, users
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.users.user import ACTIVE, PENDING_ERASURE
from sqlalchemy import Connection, select


@dataclass
class OpenedDays:
    """A batch of stored days of one resource, opened: column lists, one entry a day."""

    provider: list[str] = field(default_factory=list)
    day: list[date] = field(default_factory=list)
    stored_at: list[datetime] = field(default_factory=list)
    updated_at: list[datetime] = field(default_factory=list)
    # The JSON text as the pull stored it.
    payload: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.day)


class UserHealthData:
    """One live user's data, in the read transaction that found the user."""

    def __init__(self, conn: Connection, cipher: UserCipher | None, user_id: UUID) -> None:
        self.conn = conn
        self.cipher = cipher
        self.user_id = user_id

    def days(self, resource: str, first: date, last: date, batch_days: int) -> Iterator[OpenedDays]:
        """The resource's stored days in first..last (inclusive), every provider's, in
        batches of at most `batch_days`, opened."""
        if self.cipher is None:
            return  # a user with no key has stored nothing
        h = health_data.c
        query = (
            select(h.provider, h.day, h.stored_at, h.updated_at, h.sealed)
            .where(
                h.user_id == self.user_id,
                h.resource == resource,
                h.day >= first,
                h.day <= last,
            )
            .order_by(h.day, h.provider)
            # Streamed (a server-side cursor on PostgreSQL), not fetched whole.
            .execution_options(yield_per=batch_days)
        )
        for rows in self.conn.execute(query).partitions():
            opened = OpenedDays()
            for row in rows:
                opened.provider.append(row.provider)
                opened.day.append(row.day)
                opened.stored_at.append(row.stored_at)
                opened.updated_at.append(row.updated_at)
                opened.payload.append(self.cipher.open_bytes(row.sealed).decode())
            yield opened


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
    def live_user(self, team_id: UUID, user_id: UUID) -> Iterator[UserHealthData]:
        """The team's live user's data; UserNotFound (unknown, another team's, erased)
        or UserScheduledForDeletion otherwise: both 404."""
        with self._snapshot() as conn:
            status = conn.execute(
                select(users.c.status).where(users.c.user_id == user_id, users.c.team_id == team_id)
            ).scalar()
            if status == PENDING_ERASURE:
                raise UserScheduledForDeletion()
            if status != ACTIVE:
                raise UserNotFound()
            yield UserHealthData(conn, self.key_store.cipher_on(conn, user_id), user_id)
