"""Erasure effects: what a user's erasure or a team's deletion destroys, in the
transaction that records it. Unlike the read models, they never run again on a rebuild:
a destroyed key stays destroyed.

A user's erasure empties every place that holds the user's data or names the user
(lifecycle.ERASURE_REMOVES), and checks its own work in the same transaction: the rows it
deletes in each place must be the rows the Erased event says it found (`checked`, counted
when the command ran), and once the projections have run nothing may be left, the data
key included. Either failing raises ErasureNotVerified: the transaction rolls back, no
Erased event is recorded, and the sweep tries again. So an Erased event in the log is a
record of what was there and of a check that passed, not an assertion.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.key_store import KeyStore
from healthledger.adapters.persistence.schema import (
    connections,
    health_data,
    link_tokens,
    pending_erasures,
    resource_feeds,
    snapshots,
    user_data_keys,
    users,
    webhook_deliveries,
)
from healthledger.adapters.persistence.statements import CompiledStatement
from healthledger.domain.errors import ErasureNotVerified
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deliveries import PENDING
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Label,
    Table,
    Uuid,
    bindparam,
    delete,
    func,
    select,
)

# The events with erasure effects (neither class has subclasses).
ERASING = frozenset({User.Erased, Team.Deleted})

# Each place a user's erasure deletes, by the column that names the user, in the order
# they are deleted: the users row first, so that a chunk of health data stored
# concurrently is either committed before (and deleted here) or refused for want of the
# row (SqlHealthDataStore._require_user).
DELETED: dict[str, Column[Any]] = {
    "read_model:users": users.c.user_id,
    "read_model:pending_erasures": pending_erasures.c.user_id,
    "read_model:connections": connections.c.user_id,
    "read_model:resource_feeds": resource_feeds.c.user_id,
    "read_model:link_tokens": link_tokens.c.user_id,
    "health_data": health_data.c.user_id,
    "snapshots": snapshots.c.originator_id,
    "user_data_key": user_data_keys.c.user_id,
}
# The tables that name a user and keep their rows after its erasure, and why: ids and
# states only, no personal value. (A test holds every table with a user_id column to
# DELETED or to this.)
KEPT = {
    # The delivery history (event type, status, attempts): the deletion report and the
    # audit read it. The payload is never stored: it is built from the user's data when
    # sent, so what is still queued at the erasure is dropped instead (the Dropped events
    # recorded with the Erased one).
    "webhook_deliveries": "delivery history; queued ones dropped",
    # Which streams were the user's, so that its audit finds them after the erasure.
    "stream_owners": "ids of the user's streams, for its audit",
}

if set(DELETED) | {QUEUED_DELIVERIES} != set(ERASURE_REMOVES):
    raise RuntimeError("the erasure effects and lifecycle.ERASURE_REMOVES name other places")


# Built and compiled once: a sweep runs them for every user it erases (ADR 0014).
_UID = bindparam("uid", type_=Uuid())
_QUEUED = (webhook_deliveries.c.user_id == _UID) & (webhook_deliveries.c.status == PENDING)


def _count(table: Table, where: ColumnElement[bool], place: str) -> Label[Any]:
    return select(func.count()).select_from(table).where(where).scalar_subquery().label(place)


_DELETED_COUNTS = [_count(c.table, c == _UID, place) for place, c in DELETED.items()]
_QUEUED_COUNT = _count(webhook_deliveries, _QUEUED, QUEUED_DELIVERIES)
# The rows each place holds for the user: the deleted places, and with the queued
# deliveries, every place of ERASURE_REMOVES (in its order).
COUNT_DELETED = CompiledStatement(select(*_DELETED_COUNTS))
COUNT_EVERY_PLACE = CompiledStatement(
    select(*sorted([*_DELETED_COUNTS, _QUEUED_COUNT], key=lambda c: ERASURE_REMOVES.index(c.name)))
)
COUNT_QUEUED = CompiledStatement(
    select(func.count()).select_from(webhook_deliveries).where(_QUEUED)
)
SELECT_QUEUED = CompiledStatement(select(webhook_deliveries.c.delivery_id).where(_QUEUED))
# SQLAlchemy's own execution for the deletes: their row counts are what is checked.
DELETES = {place: delete(column.table).where(column == _UID) for place, column in DELETED.items()}


def rows_naming(conn: Connection, user_id: UUID) -> dict[str, int]:
    """The rows each place of ERASURE_REMOVES holds for the user (queued deliveries
    included), in one round trip."""
    (found,) = COUNT_EVERY_PLACE.rows(conn, {"uid": user_id})
    return dict(zip(ERASURE_REMOVES, map(int, found), strict=True))


class ErasurePlaces:
    """What the user lifecycle reads before an erasure (its ports)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def inventory(self, user_id: UUID) -> dict[str, int]:
        """The rows each deleted place holds for the user (not the queued deliveries,
        which the lifecycle counts as it drops them)."""
        with self.db.read() as conn:
            (found,) = COUNT_DELETED.rows(conn, {"uid": user_id})
        return dict(zip(DELETED, map(int, found), strict=True))

    def queued_deliveries(self, user_id: UUID) -> list[UUID]:
        """The webhook deliveries about the user still queued (to be dropped)."""
        with self.db.read() as conn:
            return [row[0] for row in SELECT_QUEUED.rows(conn, {"uid": user_id})]


@contextmanager
def erasure_effects(conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> Iterator[None]:
    """Around the projection of `events`: before it, delete what each user erased in them
    held (checking the counts against its Erased event) and destroy the data key of each
    team deleted in them (which sealed its custom credential secrets, its webhook
    signing secrets and its client_user_id digest secret); after it, check that nothing
    of each erased user is left. Raises ErasureNotVerified otherwise."""
    erased: list[User.Erased] = []
    for event in events:
        if type(event) not in ERASING:
            continue  # nearly every event: one set lookup instead of two isinstance calls
        if isinstance(event, User.Erased):
            _erase(conn, event)
            erased.append(event)
        elif isinstance(event, Team.Deleted):
            KeyStore.destroy(conn, event.originator_id)
    yield
    for event in erased:
        for place, left in rows_naming(conn, event.originator_id).items():
            if left:
                raise ErasureNotVerified(event.originator_id, place, 0, left, "after erasure")


def _erase(conn: Connection, event: User.Erased) -> None:
    user_id, expected = event.originator_id, event.checked
    values = {"uid": user_id}
    # Dropped by the Dropped events recorded with this one (checked after the projection).
    ((queued,),) = COUNT_QUEUED.rows(conn, values)
    _check(user_id, QUEUED_DELIVERIES, expected, int(queued))
    for place, statement in DELETES.items():
        _check(user_id, place, expected, conn.execute(statement, values).rowcount)


def _check(user_id: UUID, place: str, expected: dict[str, int], found: int) -> None:
    if expected.get(place, 0) != found:
        raise ErasureNotVerified(user_id, place, expected.get(place, 0), found, "at erasure")
