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

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    continuous_queries,
    continuous_query_tasks,
    health_data,
    lab_report_uploads,
    metadata,
    provider_tokens,
    raw_payloads,
    session_index,
    snapshots,
    unmatched_results,
    user_data_keys,
    webhook_deliveries,
)
from healthledger.adapters.persistence.engine.statements import among
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.audited import READ_MODEL_PLACE, audited_aggregates, audited_events
from healthledger.domain.errors import ErasureNotVerified
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deliveries import PENDING
from sqlalchemy import (
    Column,
    ColumnElement,
    CompoundSelect,
    Connection,
    Select,
    and_,
    delete,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.sql.dml import ReturningDelete

# The events with erasure effects: those that destroy their originator's data key (each
# declares SHREDS_KEY: a user's erasure, a team's deletion).
ERASING = frozenset(event for event in audited_events() if event.SHREDS_KEY)

# The read models that hold what a user's streams project about the user: each aggregate
# about a user names its own (its USER_STREAM's `read_models`), in the order of
# ERASURE_REMOVES. The users row is deleted first, so that a chunk of health data stored
# concurrently is either committed before (and deleted here) or refused for want of the
# row (SqlHealthDataStore._user_and_key).
_USERS_ROW = f"{READ_MODEL_PLACE}users"
_DECLARED = {
    place
    for aggregate in audited_aggregates()
    if aggregate.USER_STREAM is not None
    for place in aggregate.USER_STREAM.read_models
}
_READ_MODELS = [_USERS_ROW] + [p for p in ERASURE_REMOVES if p in _DECLARED and p != _USERS_ROW]

# Each place a user's erasure deletes, by the column that names the user, in the order
# they are deleted: the read models (their table's `user_id`), then what the log does not
# project.
DELETED: dict[str, Column[Any]] = {
    **{
        place: metadata.tables[place.removeprefix(READ_MODEL_PLACE)].c.user_id
        for place in _READ_MODELS
    },
    "health_data": health_data.c.user_id,
    # Where the user's sleeps and workouts are stored, by their ids (revision 0030).
    "session_index": session_index.c.user_id,
    # The makers' payloads as received, sealed with its key (`*.get_raw`, ADR 0046).
    "raw_payloads": raw_payloads.c.user_id,
    # The maker's tokens of the user's OAuth connections (sealed with its key; ADR 0022).
    "provider_tokens": provider_tokens.c.user_id,
    # The team's continuous queries of the user (their latest result sealed with its key)
    # and their runs (ADR 0044).
    "continuous_queries": continuous_queries.c.user_id,
    "continuous_query_tasks": continuous_query_tasks.c.user_id,
    # Lab reports uploaded to the parser and not parsed yet, sealed with its key (the
    # parsed reports are sealed in their jobs' events: the key takes them).
    "lab_report_uploads": lab_report_uploads.c.user_id,
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
    # Days stored before revision 0021: the service's start converts them into blocks
    # and deletes them before anything runs (health_data/conversion.py), so it is empty
    # whenever an erasure runs; what a key no longer opens is shredded with it.
    "health_data_days": "days of the old format, emptied at the start",
    # Users whose sessions of before revision 0030 the start indexes: it empties the
    # table before anything runs (health_data/sessions.py); a user id, nothing else.
    "session_index_backfill": "users to index at the start, emptied there",
    # Users whose rows of health data and raw payloads the start keys (revision 0039,
    # ADR 0047): it empties the table before anything runs; a user id, nothing else.
    "place_digest_backfill": "users whose rows the start keys, emptied there",
    # Users whose rows' sealed values the start gives the log's (revision 0048, ADR 0054):
    # it empties the table before anything runs; a user id, nothing else.
    "user_row_resyncs": "users whose rows the start re-syncs, emptied there",
}

if set(DELETED) | {QUEUED_DELIVERIES} != set(ERASURE_REMOVES):
    raise RuntimeError("the erasure effects and lifecycle.ERASURE_REMOVES name other places")


# A batch of users, bound as one list (`among`: on SQLite an expanding IN, bound once per
# place a statement looks at, so a batch is at most ERASURE_BATCH_LIMIT users, well within
# SQLite's limit of bound values, 32,766; on PostgreSQL one array).
ERASURE_BATCH_LIMIT = 1_000
# Where each place of ERASURE_REMOVES finds a user's rows: the deleted places by the
# column that names the user, the queued deliveries by theirs and their status.
_LOOKED_AT: dict[str, tuple[Column[Any], ColumnElement[bool] | None]] = {
    **{place: (column, None) for place, column in DELETED.items()},
    QUEUED_DELIVERIES: (webhook_deliveries.c.user_id, webhook_deliveries.c.status == PENDING),
}


def _counting(places: Sequence[str], postgres: bool) -> CompoundSelect:
    """Per place and per user of a batch, the rows the place holds (none: no row), in
    one statement."""
    parts = []
    for place in places:
        column, also = _LOOKED_AT[place]
        where = among(column, "uids", postgres=postgres)
        parts.append(
            select(literal(place).label("place"), column.label("user_id"), func.count())
            .where(where if also is None else and_(where, also))
            .group_by(column)
        )
    return union_all(*parts)


@dataclass(frozen=True)
class BatchStatements:
    """The statements of a batch's erasure, for one kind of database."""

    count_deleted: CompoundSelect
    count_queued: CompoundSelect
    count_every_place: CompoundSelect
    select_queued: Select[Any]
    # Each place's rows of a batch deleted, naming their user: what is checked, per user.
    deletes: dict[str, ReturningDelete[Any]]

    @classmethod
    def built(cls, postgres: bool) -> BatchStatements:
        d = webhook_deliveries.c
        return cls(
            count_deleted=_counting(list(DELETED), postgres),
            count_queued=_counting([QUEUED_DELIVERIES], postgres),
            count_every_place=_counting(ERASURE_REMOVES, postgres),
            select_queued=select(d.user_id, d.delivery_id).where(
                among(d.user_id, "uids", postgres=postgres), d.status == PENDING
            ),
            deletes={
                place: delete(column.table)
                .where(among(column, "uids", postgres=postgres))
                .returning(column)
                for place, column in DELETED.items()
            },
        )


# Built once per kind of database: SQLAlchemy compiles each once and keeps it.
_BATCH_STATEMENTS = {postgres: BatchStatements.built(postgres) for postgres in (False, True)}


def statements_for(conn: Connection) -> BatchStatements:
    return _BATCH_STATEMENTS[conn.dialect.name == "postgresql"]


def counted(
    conn: Connection, statement: CompoundSelect, places: Sequence[str], user_ids: Sequence[UUID]
) -> dict[UUID, dict[str, int]]:
    """Per user: the rows each of `places` holds (zeros included), by `statement`."""
    found = {user_id: dict.fromkeys(places, 0) for user_id in user_ids}
    if user_ids:
        for place, user_id, rows in conn.execute(statement, {"uids": list(user_ids)}):
            found[user_id][place] = int(rows)
    return found


def rows_naming(conn: Connection, user_ids: Sequence[UUID]) -> dict[UUID, dict[str, int]]:
    """Per user: the rows each place of ERASURE_REMOVES holds (queued deliveries
    included), in one round trip for the batch."""
    return counted(conn, statements_for(conn).count_every_place, ERASURE_REMOVES, user_ids)


class ErasurePlaces:
    """What the user lifecycle reads before an erasure (its ports), for a batch of users
    at once."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def inventories(self, user_ids: Sequence[UUID]) -> dict[UUID, dict[str, int]]:
        """Per user: the rows each deleted place holds (not the queued deliveries, which
        the lifecycle counts as it drops them)."""
        with self.db.read() as conn:
            return counted(conn, statements_for(conn).count_deleted, list(DELETED), user_ids)

    def inventory(self, user_id: UUID) -> dict[str, int]:
        """The rows each deleted place holds for one user."""
        return self.inventories([user_id])[user_id]

    def queued_deliveries(self, user_ids: Sequence[UUID]) -> dict[UUID, list[UUID]]:
        """Per user: the webhook deliveries about it still queued (to be dropped)."""
        found: dict[UUID, list[UUID]] = {}
        if user_ids:
            with self.db.read() as conn:
                query = statements_for(conn).select_queued
                for user_id, delivery_id in conn.execute(query, {"uids": list(user_ids)}):
                    found.setdefault(user_id, []).append(delivery_id)
        return found


@contextmanager
def erasure_effects(conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> Iterator[None]:
    """Around the projection of `events`: before it, delete what the users erased in them
    held (checking the counts against each one's Erased event) and destroy the data key
    of each team deleted in them (which sealed its custom credential secrets, its webhook
    signing secrets and its client_user_id digest secret); after it, check that nothing
    of any erased user is left. Raises ErasureNotVerified otherwise. The users erased
    together (a sweep's batch) are counted, deleted and checked together: a statement
    per place, not per user."""
    erased: list[User.Erased] = []
    for event in events:
        if type(event) not in ERASING:
            continue  # nearly every event: one set lookup instead of an isinstance call
        if isinstance(event, User.Erased):
            erased.append(event)
        else:
            # Any other that shreds a key (a team's deletion, an unmatched result's
            # decision) destroys its originator's.
            KeyStore.destroy(conn, event.originator_id)
            if isinstance(event, Team.Deleted):
                _shred_pending_results(conn, event.originator_id)
    if erased:
        _erase(conn, erased)
    yield
    if erased:
        left = rows_naming(conn, [event.originator_id for event in erased])
        for event in erased:
            for place, rows in left[event.originator_id].items():
                if rows:
                    raise ErasureNotVerified(event.originator_id, place, 0, rows, "after erasure")


def _shred_pending_results(conn: Connection, team_id: UUID) -> None:
    """A deleted team's unmatched results hold patients' data sealed with keys of their
    own (ADR 0040): those still waiting for a decision go with the team's key. Their
    rows keep the ciphertext, as a rebuild would write it: it opens no more."""
    u = unmatched_results.c
    results = select(u.result_id).where(u.team_id == team_id, u.sealed_result.is_not(None))
    conn.execute(delete(user_data_keys).where(user_data_keys.c.user_id.in_(results)))


def _erase(conn: Connection, erased: Sequence[User.Erased]) -> None:
    user_ids = [event.originator_id for event in erased]
    statements = statements_for(conn)
    # Dropped by the Dropped events recorded with these (checked after the projection).
    queued = counted(conn, statements.count_queued, [QUEUED_DELIVERIES], user_ids)
    for event in erased:
        found = queued[event.originator_id][QUEUED_DELIVERIES]
        _check(event.originator_id, QUEUED_DELIVERIES, event.checked, found)
    for place, statement in statements.deletes.items():
        deleted = Counter(conn.execute(statement, {"uids": user_ids}).scalars())
        for event in erased:
            _check(event.originator_id, place, event.checked, deleted[event.originator_id])


def _check(user_id: UUID, place: str, expected: dict[str, int], found: int) -> None:
    if expected.get(place, 0) != found:
        raise ErasureNotVerified(user_id, place, expected.get(place, 0), found, "at erasure")
