"""The users read model (and the pending erasures the sweep selects from)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.projections import Handlers
from healthledger.adapters.persistence.schema import (
    connections,
    pending_erasures,
    resource_feeds,
    team_api_keys,
    users,
)
from healthledger.adapters.persistence.statements import CompiledStatement, insert_of
from healthledger.domain.context import DEFAULT_ENVIRONMENT
from healthledger.domain.users.user import ACTIVE, MANUAL_SOURCE, PENDING_ERASURE, User
from sqlalchemy import Connection, bindparam, delete, select, update

UPDATE_USER = update(users).where(users.c.user_id == bindparam("uid"))

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


def user_created(conn: Connection, e: User.Created) -> None:
    timezone, sealed = e.fallback_time_zone, e.sealed_birth_date
    INSERT_USER.execute(
        conn,
        {
            "user_id": e.originator_id,
            "team_id": e.team_id,
            "client_user_id": e.client_user_id,
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
    conn.execute(UPDATE_USER, {"uid": e.originator_id, **values})


def user_client_user_id_changed(conn: Connection, e: User.ClientUserIdChanged) -> None:
    conn.execute(
        UPDATE_USER,
        {
            "uid": e.originator_id,
            "client_user_id": e.new_client_user_id,
            "version": e.originator_version,
        },
    )


def user_demographics_recorded(conn: Connection, e: User.DemographicsRecorded) -> None:
    conn.execute(
        UPDATE_USER,
        {
            "uid": e.originator_id,
            "sealed_demographics": e.sealed_demographics,
            "demographics_updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


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


def user_erased(conn: Connection, e: User.Erased) -> None:
    # An erased user is 404 everywhere: no row of it is left to read.
    conn.execute(delete(users).where(users.c.user_id == e.originator_id))
    DELETE_PENDING.execute(conn, {"uid": e.originator_id})
    conn.execute(delete(connections).where(connections.c.user_id == e.originator_id))
    conn.execute(delete(resource_feeds).where(resource_feeds.c.user_id == e.originator_id))


HANDLERS: Handlers = {
    User.Created: user_created,
    User.SettingsChanged: user_settings_changed,
    User.ClientUserIdChanged: user_client_user_id_changed,
    User.DemographicsRecorded: user_demographics_recorded,
    User.Deleted: user_deleted,
    User.DeletionUndone: user_deletion_undone,
    User.Erased: user_erased,
}
