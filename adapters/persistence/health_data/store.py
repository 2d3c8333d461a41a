"""The health data store (the domain's HealthDataStore port) on SQL: one sealed row per
(user, provider, resource, day)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, users
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher, canonical_json
from healthledger.domain.connections.health_data import StoredDay, StoreResult, UserDataGone
from healthledger.domain.ledger import Clock
from sqlalchemy import Connection, bindparam, func, insert, select, update

# Many days a store: each run as one executemany.
INSERT_DAY = insert(health_data)
UPDATE_DAY = update(health_data).where(
    health_data.c.user_id == bindparam("uid"),
    health_data.c.provider == bindparam("prov"),
    health_data.c.resource == bindparam("res"),
    health_data.c.day == bindparam("d"),
)


class SqlHealthDataStore:
    def __init__(self, db: Database, key_store: KeyStore, clock: Clock) -> None:
        self.db = db
        self.key_store = key_store
        self.clock = clock

    def store(
        self, user_id: UUID, provider: str, data: Mapping[str, Mapping[date, Any]]
    ) -> dict[str, StoreResult]:
        results = {resource: StoreResult() for resource in data}
        if not any(data.values()):
            return results
        cipher = self.key_store.cipher(user_id)
        if cipher is None:
            raise UserDataGone()
        # Encode and digest outside the write transaction: the writer lock is for SQL.
        plain = {
            (resource, day): canonical_json(payload)
            for resource, days in data.items()
            for day, payload in days.items()
        }
        digests = {key: cipher.digest(text) for key, text in plain.items()}
        now = self.clock()
        h = health_data.c
        with self.db.write() as conn:
            self._require_user(conn, user_id)
            stored = {
                (row.resource, row.day): row.digest
                for row in conn.execute(
                    select(h.resource, h.day, h.digest).where(
                        h.user_id == user_id,
                        h.provider == provider,
                        h.resource.in_([r for r, days in data.items() if days]),
                        h.day.in_({day for days in data.values() for day in days}),
                    )
                )
            }
            inserts, updates = [], []
            for (resource, day), digest in sorted(digests.items()):
                if (resource, day) not in stored:
                    results[resource].created.append(day)
                    inserts.append(
                        {
                            "user_id": user_id,
                            "provider": provider,
                            "resource": resource,
                            "day": day,
                            "sealed": cipher.seal_bytes(plain[resource, day]),
                            "digest": digest,
                            "stored_at": now,
                            "updated_at": now,
                        }
                    )
                elif stored[resource, day] != digest:
                    results[resource].updated.append(day)
                    updates.append(
                        {
                            "uid": user_id,
                            "prov": provider,
                            "res": resource,
                            "d": day,
                            "sealed": cipher.seal_bytes(plain[resource, day]),
                            "digest": digest,
                            "updated_at": now,
                        }
                    )
            if inserts:
                conn.execute(INSERT_DAY, inserts)
            if updates:
                conn.execute(UPDATE_DAY, updates)
        return results

    def read(
        self, user_id: UUID, provider: str, resource: str, start: date, end: date
    ) -> dict[date, Any]:
        cipher = self.key_store.cipher(user_id)
        if cipher is None:
            return {}
        h = health_data.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(h.day, h.sealed)
                .where(
                    h.user_id == user_id,
                    h.provider == provider,
                    h.resource == resource,
                    h.day >= start,
                    h.day <= end,
                )
                .order_by(h.day)
            ).all()
        return {row.day: cipher.open(row.sealed) for row in rows}

    def read_range(
        self,
        user_id: UUID,
        start: date,
        end: date,
        *,
        resources: Collection[str] | None = None,
        provider: str | None = None,
    ) -> list[StoredDay]:
        """The user's stored days in start..end (inclusive), across providers (or of
        one), of some resources (or all), in (resource, day, provider) order; none for an
        erased user."""
        h = health_data.c
        query = select(h.provider, h.resource, h.day, h.sealed, h.stored_at, h.updated_at).where(
            h.user_id == user_id, h.day >= start, h.day <= end
        )
        if resources is not None:
            query = query.where(h.resource.in_(list(resources)))
        if provider is not None:
            query = query.where(h.provider == provider)
        with self.db.read() as conn:
            # The key and the rows in one transaction: an erasure is before both or after.
            cipher = self.key_store.cipher_on(conn, user_id)
            if cipher is None:
                return []
            rows = conn.execute(query.order_by(h.resource, h.day, h.provider)).all()
        return opened_days(rows, cipher)

    def count(self, user_id: UUID) -> int:
        with self.db.read() as conn:
            return conn.execute(
                select(func.count())
                .select_from(health_data)
                .where(health_data.c.user_id == user_id)
            ).scalar_one()

    def _require_user(self, conn: Connection, user_id: UUID) -> None:
        # On PostgreSQL the row lock orders this write against an erasure deleting the user
        # row (erasure deletes that row before the health data, in one transaction): either
        # these rows are committed first and erased with the rest, or the user is gone here.
        query = select(users.c.user_id).where(users.c.user_id == user_id)
        if not self.db.is_sqlite:
            query = query.with_for_update(read=True)
        if conn.execute(query).first() is None:
            raise UserDataGone()


def opened_days(rows: Iterable[Any], cipher: UserCipher) -> list[StoredDay]:
    """Rows of `health_data` (provider, resource, day, sealed, stored_at, updated_at),
    opened with the user's key."""
    return [
        StoredDay(
            provider=row.provider,
            resource=row.resource,
            day=row.day,
            plaintext=cipher.open_bytes(row.sealed),
            stored_at=row.stored_at,
            updated_at=row.updated_at,
        )
        for row in rows
    ]
