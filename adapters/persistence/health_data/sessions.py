"""The session index (revision 0030, docs/data.md#sessions): from a sleep's or a
workout's public id to the user, provider, resource and day that hold it.

A summary's id (`summary_ids.SummaryIds`: keyed by the user's key, or a uuid5 of the
user, provider, resource and key for a user whose key predates keyed ids) cannot be
turned back into what names it. The store writes one row per session in the
transaction that stores its day (`SqlHealthDataStore.store`): the user and its team in
clear, the rest sealed under the user's key and bound to the session id, so that a row
moved to another id does not open. Sessions stored before the revision are indexed at
the service's start (`index_stored_sessions`), resumably: one user a transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    health_data,
    session_index,
    session_index_backfill,
    users,
)
from healthledger.adapters.persistence.health_data import blocks
from healthledger.adapters.persistence.health_data.places import Places
from healthledger.adapters.persistence.keys.key_store import (
    KeyStore,
    UserCipher,
    canonical_json,
)
from healthledger.domain.connections.sessions import SESSION_RESOURCES, sessions_of
from sqlalchemy import Connection, Insert, delete, select
from sqlalchemy.dialects import postgresql, sqlite

log = logging.getLogger("healthledger.health_data")

# The resources whose sessions an id names for a read of their samples: the night's sleep
# (its stream) and each workout (its stream).
INDEXED_RESOURCES = frozenset({"sleep", "workouts"})


@dataclass(frozen=True)
class SessionPlace:
    """Where a session is stored: its provider, resource, day and key (the day's iso
    date for a daily summary, the provider's id for a session)."""

    provider: str
    resource: str
    day: date
    key: str


def _context(session_id: UUID) -> bytes:
    return b"session-index\x00" + session_id.bytes


def session_places(provider: str, resource: str, day: date, value: Any) -> list[SessionPlace]:
    """The sessions a stored day of `resource` holds (none for a resource not indexed)."""
    if resource not in INDEXED_RESOURCES:
        return []
    if resource in SESSION_RESOURCES:
        return [
            SessionPlace(provider, resource, day, key) for key in sessions_of(resource, day, value)
        ]
    return [SessionPlace(provider, resource, day, day.isoformat())] if value else []


def index_rows(
    cipher: UserCipher, user_id: UUID, team_id: UUID, places: Iterable[SessionPlace]
) -> list[dict[str, Any]]:
    """The index's rows of `places`, each sealed under the user's key."""
    rows = []
    for place in places:
        session_id = cipher.summary_ids.summary(
            place.provider, place.resource, place.day, place.key
        )
        locator = {
            "provider": place.provider,
            "resource": place.resource,
            "day": place.day.isoformat(),
            "key": place.key,
        }
        rows.append(
            {
                "session_id": session_id,
                "user_id": user_id,
                "team_id": team_id,
                "sealed": cipher.seal_raw(canonical_json(locator), _context(session_id)),
            }
        )
    return rows


def open_place(cipher: UserCipher, session_id: UUID, sealed: bytes) -> SessionPlace:
    """A row's sealed locator, opened."""
    locator = json.loads(cipher.open_raw(bytes(sealed), _context(session_id)))
    return SessionPlace(
        provider=locator["provider"],
        resource=locator["resource"],
        day=date.fromisoformat(locator["day"]),
        key=locator["key"],
    )


def insert_new(is_sqlite: bool) -> Insert:
    """Rows of sessions not indexed yet: a session stored again (a day pulled again, a
    workout's day grown by another) keeps its row."""
    dialect_insert = sqlite.insert if is_sqlite else postgresql.insert
    return dialect_insert(session_index).on_conflict_do_nothing(index_elements=["session_id"])


def write_index(conn: Connection, is_sqlite: bool, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert_new(is_sqlite), rows)


def leave_no_erased_sessions(db: Database) -> None:
    """After a sweep's erasures: no page of the index keeps an erased user's rows. The
    ids of a user whose key predates keyed ids (ADR 0057) are uuid5s of the user, maker,
    resource and day, so one holding the user's id (in clear after the erasure) tries
    the catalog's slugs against them and learns which makers the person had (ADR 0049);
    a keyed id tells nothing once its key is gone, but the rewrite does not tell them
    apart. SQLite: secure_delete overwrote the rows, and the sweep's checkpoint after
    each batch took the WAL's pages (`vacuum_key_store`). On PostgreSQL a deleted row
    stays in the table's and its primary key's pages until overwritten (a plain VACUUM
    frees the space, it does not clear it): rewritten."""
    if not db.is_sqlite:
        db.rewrite(session_index.name)


def index_stored_sessions(db: Database, key_store: KeyStore) -> int:
    """Every user the migration listed (sessions stored before revision 0030) indexed and
    unlisted, one user a transaction (a start that stops halfway goes on at the next);
    the sessions indexed. Logs counts only."""
    with db.read() as conn:
        pending = list(conn.execute(select(session_index_backfill.c.user_id)).scalars())
    if not pending:
        return 0
    h = health_data.c
    indexed = 0
    for number, user_id in enumerate(pending, 1):
        with db.write() as conn:
            team_id = conn.execute(
                select(users.c.team_id).where(users.c.user_id == user_id)
            ).scalar_one_or_none()
            cipher = key_store.cipher_on(conn, user_id)
            if team_id is not None and cipher is not None:
                # By the digests of their names (ADR 0047; the start keys them first).
                names = Places(cipher.digest)
                held = names.named(
                    conn.execute(
                        select(h.provider, h.resource, h.period, h.version, h.sealed).where(
                            h.user_id == user_id,
                            h.replaced_at.is_(None),
                            h.resource.in_(names.resources(sorted(INDEXED_RESOURCES))),
                        )
                    )
                )
                places = [
                    place
                    for row in held
                    for day, value in _days(cipher, row)
                    for place in session_places(row.provider, row.resource, day, value)
                ]
                rows = index_rows(cipher, user_id, team_id, places)
                write_index(conn, db.is_sqlite, rows)
                indexed += len(rows)
            # An erased user (no key, no row) has nothing to index.
            conn.execute(
                delete(session_index_backfill).where(session_index_backfill.c.user_id == user_id)
            )
        log.info("session index: %d of %d users indexed", number, len(pending))
    return indexed


def _days(cipher: UserCipher, row: Any) -> list[tuple[date, Any]]:
    # Imported here: the store imports this module to index what it stores.
    from healthledger.adapters.persistence.health_data.store import block_context

    plain = cipher.open_raw(
        bytes(row.sealed), block_context(row.provider, row.resource, row.period)
    )
    return [(day, json.loads(text)) for day, text, _, _ in blocks.decode(plain).payloads()]
