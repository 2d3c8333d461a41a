"""The users read model (and the pending erasures the sweep selects from)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    pending_erasures,
    team_api_keys,
    user_row_resyncs,
    users,
)
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    delete_by,
    insert_of,
)
from healthledger.adapters.persistence.projections import Handlers, handles
from healthledger.adapters.persistence.projections.erasure import DELETED, READ_MODEL_PLACE
from healthledger.domain.context import DEFAULT_ENVIRONMENT
from healthledger.domain.users.user import ACTIVE, MANUAL_SOURCE, PENDING_ERASURE, User
from sqlalchemy import Connection, bindparam, delete, or_, select, update

# A user's row, the columns each event sets (compiled once per set: a rebuild runs them
# for every event, held and run together, see ReadModels.rebuild).
UPDATE_USER = UpdatesByKey(users, "user_id")

# Compiled once: every create, delete and undo runs them (ADR 0014).
USER_COLUMNS = (
    "user_id",
    "team_id",
    "sealed_client_user_id",
    "client_user_id_digest",
    "status",
    "created_on",
    "sealed_fallback_time_zone",
    "fallback_time_zone_source",
    "fallback_time_zone_updated_at",
    "sealed_birth_date",
    "birth_date_source",
    "birth_date_updated_at",
    "ingestion_start",
    "ingestion_end",
    "version",
    "environment",
)
INSERT_USER = CompiledStatement(insert_of(users, USER_COLUMNS))
SET_STATUS = CompiledStatement(
    update(users)
    .where(users.c.user_id == bindparam("uid"))
    .values(
        status=bindparam("status"),
        deleted_at=bindparam("deleted_at"),
        erasure_due_at=bindparam("erasure_due_at"),
        version=bindparam("version"),
    )
)
INSERT_PENDING = CompiledStatement(insert_of(pending_erasures, ("user_id", "due_at")))
# A change's team, for its digest (a read: it runs the writes held before it).
TEAM_OF_USER = CompiledStatement(select(users.c.team_id).where(users.c.user_id == bindparam("uid")))
DELETE_PENDING = CompiledStatement(
    delete(pending_erasures).where(pending_erasures.c.user_id == bindparam("uid"))
)


# Opens a user's sealed value on the recording (or rebuilding) transaction's connection:
# (conn, user_id, sealed) -> the value, or None once the user's key is destroyed.
OpenSealed = Callable[[Connection, UUID, str], Any]
# Seals a value with the user's stored key on that connection: (conn, user_id, value) ->
# the sealed text, or None when the user has no key (never creates one).
SealOn = Callable[[Connection, UUID, str], str | None]
# The team's keyed digest of a client_user_id: (team_id, value) -> hex, or None when the
# team has no secret to compute it with (deleted; never creates one).
DigestOf = Callable[[UUID, str], str | None]


def _no_key_store(conn: Connection, user_id: UUID, sealed: str) -> Any:
    raise RuntimeError("projecting a sealed client_user_id needs the key store (ReadModels)")


def _no_seal(conn: Connection, user_id: UUID, value: str) -> str | None:
    return None


@dataclass(frozen=True)
class ClientUserIdKeys:
    """What the users projection keeps a client_user_id with: never in clear (ADR 0017).

    `open_sealed` opens the value an event holds sealed (to compute its digest); `seal`
    seals a value an event holds in clear (recorded before it was sealed) with the
    user's key; `digest` is the team's keyed digest. A copy without keys (`replay`) or
    secrets gets NULLs where it cannot compute: never the clear value."""

    open_sealed: OpenSealed = _no_key_store
    seal: SealOn = _no_seal
    digest: DigestOf | None = None


def client_user_id_columns(
    conn: Connection,
    user_id: UUID,
    team_id: UUID | None,
    clear: str | None,
    sealed: str | None,
    keys: ClientUserIdKeys,
) -> dict[str, str | None]:
    """The users row's client_user_id columns of an event's value: the sealed text (as
    the event recorded it, or the clear value of an older event sealed with the user's
    key) and the team's digest of the value. A rebuild meets an erased user's key gone:
    the digest is NULL then, and the user's Erased event, later in the same rebuild,
    deletes the row."""
    value = clear
    if clear is None:
        assert sealed is not None, "an event holds the client_user_id in clear or sealed"
        if keys.digest is not None:
            opened = keys.open_sealed(conn, user_id, sealed)
            value = None if opened is None else str(opened)
    else:
        sealed = keys.seal(conn, user_id, clear)
    digest = None
    if value is not None and keys.digest is not None:
        assert team_id is not None, "a digest is of a team's value"
        digest = keys.digest(team_id, value)
    return {"sealed_client_user_id": sealed, "client_user_id_digest": digest}


@handles(User.Created)
def user_created(
    conn: Connection, e: User.Created, keys: ClientUserIdKeys = ClientUserIdKeys()
) -> None:
    timezone = sealed_time_zone(conn, e.originator_id, e.fallback_time_zone, keys.seal)
    if timezone is None:
        timezone = e.sealed_fallback_time_zone
    sealed = e.sealed_birth_date
    client_user_id = client_user_id_columns(
        conn, e.originator_id, e.team_id, e.client_user_id, e.sealed_client_user_id, keys
    )
    INSERT_USER.execute(
        conn,
        {
            "user_id": e.originator_id,
            "team_id": e.team_id,
            **client_user_id,
            "status": ACTIVE,
            "created_on": e.timestamp,
            "sealed_fallback_time_zone": timezone,
            "fallback_time_zone_source": timezone and MANUAL_SOURCE,
            "fallback_time_zone_updated_at": timezone and e.timestamp,
            "sealed_birth_date": sealed,
            "birth_date_source": sealed and MANUAL_SOURCE,
            "birth_date_updated_at": sealed and e.timestamp,
            "ingestion_start": e.ingestion_start,
            "ingestion_end": e.ingestion_end,
            "version": e.originator_version,
            "environment": e.environment or created_by_key_environment(conn, e.actor),
        },
    )


def created_by_key_environment(conn: Connection, actor: str) -> str:
    """The environment of a user whose Created event is of version 1 (stored before the
    event recorded it), when a rebuild projects it again: the creating team API key's,
    as migration 0002 found it; the default for a user created by anything else."""
    kind, _, key_id = actor.partition(":")
    if kind != "team_api_key":
        return DEFAULT_ENVIRONMENT
    found = conn.execute(
        select(team_api_keys.c.environment).where(team_api_keys.c.key_id == UUID(key_id))
    ).scalar()
    return found or DEFAULT_ENVIRONMENT


def sealed_time_zone(
    conn: Connection, user_id: UUID, clear: str | None, seal: SealOn
) -> str | None:
    """A time zone an event recorded in clear (before revision 0042; the start redacts
    those events before anything projects them), sealed with the user's key: the row
    never holds it in clear (None without a key to seal with)."""
    return None if clear is None else seal(conn, user_id, clear)


@handles(User.SettingsChanged)
def user_settings_changed(
    conn: Connection, e: User.SettingsChanged, keys: ClientUserIdKeys = ClientUserIdKeys()
) -> None:
    values: dict[str, Any] = {"version": e.originator_version}
    for key, value in e.changes.items():
        if key in ("sealed_fallback_time_zone", "fallback_time_zone"):
            if key == "fallback_time_zone":
                value = sealed_time_zone(conn, e.originator_id, value, keys.seal)
            values["sealed_fallback_time_zone"] = value
            values["fallback_time_zone_source"] = value and MANUAL_SOURCE
            values["fallback_time_zone_updated_at"] = value and e.timestamp
        elif key == "sealed_birth_date":
            values["sealed_birth_date"] = value
            values["birth_date_source"] = value and MANUAL_SOURCE
            values["birth_date_updated_at"] = value and e.timestamp
        elif key in ("ingestion_start", "ingestion_end"):
            values[key] = value
    UPDATE_USER.execute(conn, e.originator_id, values)


@handles(User.ClientUserIdChanged)
def user_client_user_id_changed(
    conn: Connection, e: User.ClientUserIdChanged, keys: ClientUserIdKeys = ClientUserIdKeys()
) -> None:
    team_id = None
    if keys.digest is not None:
        ((team_id,),) = TEAM_OF_USER.rows(conn, {"uid": e.originator_id})
    client_user_id = client_user_id_columns(
        conn, e.originator_id, team_id, e.new_client_user_id, e.sealed_new_client_user_id, keys
    )
    UPDATE_USER.execute(conn, e.originator_id, {**client_user_id, "version": e.originator_version})


@handles(User.DemographicsRecorded)
def user_demographics_recorded(conn: Connection, e: User.DemographicsRecorded) -> None:
    UPDATE_USER.execute(
        conn,
        e.originator_id,
        {
            "sealed_demographics": e.sealed_demographics,
            "demographics_updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


@handles(User.Deleted)
def user_deleted(conn: Connection, e: User.Deleted) -> None:
    SET_STATUS.execute(
        conn,
        {
            "uid": e.originator_id,
            "status": PENDING_ERASURE,
            "deleted_at": e.timestamp,
            "erasure_due_at": e.erasure_due_at,
            "version": e.originator_version,
        },
    )
    INSERT_PENDING.execute(conn, {"user_id": e.originator_id, "due_at": e.erasure_due_at})


@handles(User.DeletionUndone)
def user_deletion_undone(conn: Connection, e: User.DeletionUndone) -> None:
    SET_STATUS.execute(
        conn,
        {
            "uid": e.originator_id,
            "status": ACTIVE,
            "deleted_at": None,
            "erasure_due_at": None,
            "version": e.originator_version,
        },
    )
    DELETE_PENDING.execute(conn, {"uid": e.originator_id})


@handles(User.DeletionUndoRefused)
def user_deletion_undo_refused(conn: Connection, e: User.DeletionUndoRefused) -> None:
    # Nothing changed but the version (an erased user has no row: nothing to update).
    UPDATE_USER.execute(conn, e.originator_id, {"version": e.originator_version})


# An erased user is 404 everywhere: no row of it is left to read. The erasure itself
# deleted them already (projections/erasure.py); a rebuild has only this handler to
# delete them again: every read model the erasure empties (a new one there is one here).
ERASED_USER_ROWS = [
    CompiledStatement(delete_by(column.table, column.name))
    for place, column in DELETED.items()
    if place.startswith(READ_MODEL_PLACE)
]


@handles(User.Erased)
def user_erased(conn: Connection, e: User.Erased) -> None:
    for statement in ERASED_USER_ROWS:
        statement.execute(conn, {"row_key": e.originator_id})


def opening_handlers(keys: ClientUserIdKeys) -> Handlers:
    """The handlers of the events that hold a client_user_id (or a time zone recorded in
    clear), bound to the key store's opener and sealer and the teams' digests
    (`ReadModels` puts them over the declared ones)."""
    return {
        User.Created: partial(user_created, keys=keys),
        User.ClientUserIdChanged: partial(user_client_user_id_changed, keys=keys),
        User.SettingsChanged: partial(user_settings_changed, keys=keys),
    }


# The events whose handlers open a sealed value: a rebuild reads their users' keys at once.
# A change of settings only seals, and only a time zone recorded before revision 0042,
# which the start redacts before anything projects: no key is read for it ahead.
OPENING = frozenset((User.Created, User.ClientUserIdChanged))


# -- rows written before revision 0015 -------------------------------------------------

# The rows to convert, a batch at a time: a NULL sealed value (written before revision
# 0015, which dropped their clear value), or a NULL digest (a user of a team that had no
# secret when the row was projected: a team written before digests, whose secret the
# projection never records; the start records it).
_UNCONVERTED = or_(users.c.sealed_client_user_id.is_(None), users.c.client_user_id_digest.is_(None))
UNSEALED_ROWS = (
    select(users.c.user_id, users.c.team_id, users.c.sealed_client_user_id)
    .where(_UNCONVERTED, users.c.user_id > bindparam("after"))
    .order_by(users.c.user_id)
)
SET_SEALED = CompiledStatement(
    update(users)
    .where(users.c.user_id == bindparam("uid"), _UNCONVERTED)
    .values(
        sealed_client_user_id=bindparam("sealed"),
        client_user_id_digest=bindparam("digest"),
    )
)
CONVERT_BATCH = 500


def seal_client_user_ids(
    db: Database,
    user_of: Callable[[UUID], User | None],
    seal: Callable[[UUID, str], str],
    open_sealed: Callable[[UUID, str], Any],
    digest: Callable[[UUID, str], str | None],
    batch: int = CONVERT_BATCH,
) -> int:
    """At start, after revision 0015 dropped the users rows' clear client_user_id: give
    each row written before its sealed value and digest again, from the user's events
    (the migration cannot: it has no master key, and its offline SQL reads nothing).
    `user_of` loads the user (its value as its events hold it: sealed, or in clear if
    recorded before it was sealed); `seal` seals a clear one with the user's key (making
    the key of a user that had no personal data before); `digest` is the team's (recording
    the secret of a team that has none yet; None for a deleted team). Several processes
    may run it at once: a row is set only while still NULL. Returns the rows set; on an
    up-to-date database, one query that finds none."""
    converted, dropped_clear, after = 0, 0, UUID(int=0)
    while True:
        with db.read() as conn:
            pending = conn.execute(UNSEALED_ROWS.limit(batch), {"after": after}).all()
        if not pending:
            break
        after = pending[-1].user_id
        values = []
        for user_id, team_id, row_sealed in pending:
            user = user_of(user_id)
            if user is None:
                continue  # erased meanwhile: its row is gone
            sealed, clear = user.sealed_client_user_id, user.client_user_id
            if sealed is None:
                assert clear is not None, "a user holds its client_user_id in clear or sealed"
                sealed = seal(user_id, clear)
            value = clear if clear is not None else open_sealed(user_id, sealed)
            found = None if value is None else digest(team_id, str(value))
            if row_sealed is not None and found is None:
                continue  # no digest to give (a deleted team's): nothing to change
            values.append({"uid": user_id, "sealed": sealed, "digest": found})
            dropped_clear += row_sealed is None
        with db.write() as conn:
            for row in values:
                SET_SEALED.execute(conn, row)
        converted += len(values)
        if len(pending) < batch:
            break
    # Only rows that lost their clear value leave it behind in old row versions.
    if dropped_clear:
        leave_no_dropped_values(db)
    return converted


# -- rows an earlier start sealed under another nonce than the log's (revision 0048) ------

RESYNC_BATCH = 500
# The users row's sealed columns a redaction in place gave the log's values to.
RESYNCED = ("sealed_client_user_id", "sealed_fallback_time_zone")


def resync_sealed_values(
    db: Database,
    user_of: Callable[[UUID], User | None],
    open_sealed: Callable[[UUID, str], Any],
    batch: int = RESYNC_BATCH,
) -> int:
    """At start, for the users revision 0048 listed: each row's sealed client_user_id and
    time zone set to the log's own (the user's, as its events hold them: what a rebuild
    writes) where the row's opens to the same value under another nonce, as revision
    0042's redaction (and 0046's, before its code gave the row the record's value) left
    it (ADR 0054). A row whose value opens to another, or not at all, is left as it is:
    `verify --read-models` names it (the log cannot say which is right). Several
    processes may run it at once: a row is set only while it holds the value read.
    Returns the rows set; on an up-to-date database, one query that finds none."""
    resynced = 0
    listing = user_row_resyncs.outerjoin(users, users.c.user_id == user_row_resyncs.c.user_id)
    while True:
        with db.read() as conn:
            listed = conn.execute(
                select(user_row_resyncs.c.user_id, *(users.c[name] for name in RESYNCED))
                .select_from(listing)
                .order_by(user_row_resyncs.c.user_id)
                .limit(batch)
            ).all()
        if not listed:
            break
        changes: list[tuple[UUID, str, str | None, str]] = []
        for user_id, *row in listed:
            user = user_of(UUID(str(user_id)))
            if user is None:
                continue  # erased: its row is gone
            zone = user.sealed_fallback_time_zone
            log = (user.sealed_client_user_id, None if zone is None else zone[0])
            for name, own, logs in zip(RESYNCED, row, log, strict=True):
                if _same_value(open_sealed, user.id, own, logs):
                    assert logs is not None  # for the type checker: a value opened
                    changes.append((user.id, name, own, logs))
        with db.write() as conn:
            for user_id, name, own, logs in changes:
                resynced += conn.execute(
                    update(users)
                    .where(users.c.user_id == user_id, users.c[name] == own)
                    .values({name: logs})
                ).rowcount
            conn.execute(
                delete(user_row_resyncs).where(
                    user_row_resyncs.c.user_id.in_([user_id for user_id, *_ in listed])
                )
            )
    return resynced


def _same_value(
    open_sealed: Callable[[UUID, str], Any], user_id: UUID, own: str | None, logs: str | None
) -> bool:
    """Whether the row's sealed text and the log's differ as ciphertexts only: both open,
    with the user's key, to the same value."""
    if own is None or logs is None or own == logs:
        return False
    try:
        opened = [open_sealed(user_id, sealed) for sealed in (own, logs)]
    except (InvalidTag, ValueError):
        return False  # not sealed with the user's key (changed by hand): left for the check
    return opened[0] is not None and opened[0] == opened[1]


def leave_no_dropped_values(db: Database) -> None:
    """After converting the rows of revision 0015: no page of the users table that this
    database reaches keeps the clear values it dropped (DROP COLUMN left them in the old
    row versions on PostgreSQL): `Database.rewrite`."""
    db.rewrite(users.name)
