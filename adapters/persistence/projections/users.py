"""The users read model (and the pending erasures the sweep selects from)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.schema import (
    pending_erasures,
    team_api_keys,
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
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.users.user import ACTIVE, MANUAL_SOURCE, PENDING_ERASURE, User
from sqlalchemy import Connection, bindparam, delete, select, update

# A user's row, the columns each event sets (compiled once per set: a rebuild runs them
# for every event, held and run together, see ReadModels.rebuild).
UPDATE_USER = UpdatesByKey(users, "user_id")

# Compiled once: every create, delete and undo runs them (ADR 0014).
USER_COLUMNS = (
    "user_id",
    "team_id",
    "client_user_id",
    "status",
    "created_on",
    "fallback_time_zone",
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
DELETE_PENDING = CompiledStatement(
    delete(pending_erasures).where(pending_erasures.c.user_id == bindparam("uid"))
)


# Opens a user's sealed value on the recording (or rebuilding) transaction's connection:
# (conn, user_id, sealed) -> the value, or None once the user's key is destroyed.
OpenSealed = Callable[[Connection, UUID, str], Any]


def _no_key_store(conn: Connection, user_id: UUID, sealed: str) -> Any:
    raise RuntimeError("projecting a sealed client_user_id needs the key store (ReadModels)")


def client_user_id_of(
    conn: Connection,
    user_id: UUID,
    clear: str | None,
    sealed: str | None,
    open_sealed: OpenSealed,
) -> str:
    """The client_user_id the users row holds in clear (for lookups and answers): as
    recorded before it was sealed, else opened with the user's key. A rebuild meets an
    erased user's key gone: its row gets the placeholder, and the user's Erased event,
    later in the same rebuild, deletes the row."""
    if clear is not None:
        return clear
    assert sealed is not None, "an event holds the client_user_id in clear or sealed"
    opened = open_sealed(conn, user_id, sealed)
    return ERASED_PLACEHOLDER if opened is None else str(opened)


@handles(User.Created)
def user_created(
    conn: Connection, e: User.Created, open_sealed: OpenSealed = _no_key_store
) -> None:
    timezone, sealed = e.fallback_time_zone, e.sealed_birth_date
    client_user_id = client_user_id_of(
        conn, e.originator_id, e.client_user_id, e.sealed_client_user_id, open_sealed
    )
    INSERT_USER.execute(
        conn,
        {
            "user_id": e.originator_id,
            "team_id": e.team_id,
            "client_user_id": client_user_id,
            "status": ACTIVE,
            "created_on": e.timestamp,
            "fallback_time_zone": timezone,
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


@handles(User.SettingsChanged)
def user_settings_changed(conn: Connection, e: User.SettingsChanged) -> None:
    values: dict[str, Any] = {"version": e.originator_version}
    for key, value in e.changes.items():
        if key == "fallback_time_zone":
            values["fallback_time_zone"] = value
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
    conn: Connection, e: User.ClientUserIdChanged, open_sealed: OpenSealed = _no_key_store
) -> None:
    client_user_id = client_user_id_of(
        conn, e.originator_id, e.new_client_user_id, e.sealed_new_client_user_id, open_sealed
    )
    UPDATE_USER.execute(
        conn, e.originator_id, {"client_user_id": client_user_id, "version": e.originator_version}
    )


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


def opening_handlers(open_sealed: OpenSealed) -> Handlers:
    """The handlers of the events that hold a sealed client_user_id, bound to the key
    store's opener (`ReadModels` puts them over the declared ones)."""
    return {
        User.Created: partial(user_created, open_sealed=open_sealed),
        User.ClientUserIdChanged: partial(user_client_user_id_changed, open_sealed=open_sealed),
    }


# The events whose handlers open a sealed value: a rebuild reads their users' keys at once.
OPENING = frozenset(opening_handlers(_no_key_store))
