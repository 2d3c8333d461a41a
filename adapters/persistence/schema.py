"""Every table, in one SQLAlchemy MetaData: the event log, snapshots, the key store,
and the read models (which `healthledger rebuild` drops and rebuilds from the log)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Dialect,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both backends (SQLite keeps no offset, so we add it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Any:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        # The text SQLite's DATETIME stores ("YYYY-MM-DD HH:MM:SS.ffffff", always with the
        # microseconds), made by one C call: the generic path (process_bind_param, then a
        # %-format of seven fields) cost about 4 µs a value, and every event row has one.
        # A test holds the two paths to the same text.
        def process(value: datetime | None) -> str | None:
            naive = self.process_bind_param(value, dialect)
            return None if naive is None else naive.isoformat(" ", "microseconds")

        return process

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData()

# -- the event store -----------------------------------------------------------------

stored_events = Table(
    "stored_events",
    metadata,
    # The notification id orders the whole log (the outbox that followers track).
    Column(
        "notification_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("originator_id", Uuid, nullable=False),
    Column("originator_version", Integer, nullable=False),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    # The timestamp index for time travel, written in the same row as the event.
    Column("timestamp", UTCDateTime, nullable=False),
    UniqueConstraint("originator_id", "originator_version", name="uq_stored_events_version"),
    Index("ix_stored_events_originator_time", "originator_id", "timestamp"),
    sqlite_autoincrement=True,
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("originator_id", Uuid, primary_key=True),
    Column("originator_version", Integer, primary_key=True),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
)

tracking = Table(
    "tracking",
    metadata,
    Column("application_name", String(64), primary_key=True),
    Column("notification_id", BigInteger, primary_key=True),
)

# -- the key store (outside the event log; a row per user that has personal data) -----

user_data_keys = Table(
    "user_data_keys",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    # The user's AES-256 data key, wrapped (AES-GCM) by the master key, user id as AAD.
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# -- read models ---------------------------------------------------------------------

users = Table(
    "users",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("client_user_id", String(255), nullable=False),
    Column("status", String(20), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("fallback_time_zone", String(64)),
    Column("fallback_time_zone_source", String(64)),
    Column("fallback_time_zone_updated_at", UTCDateTime),
    Column("sealed_birth_date", Text),
    Column("birth_date_source", String(64)),
    Column("birth_date_updated_at", UTCDateTime),
    Column("ingestion_start", Date),
    Column("ingestion_end", Date),
    Column("sealed_demographics", Text),
    Column("demographics_updated_at", UTCDateTime),
    Column("deleted_at", UTCDateTime),
    Column("erasure_due_at", UTCDateTime),
    Column("version", Integer, nullable=False),
    Index("ix_users_team_client_user_id", "team_id", "client_user_id"),
    # Status stays out of the index: delete and undo then move no index entry.
    Index("ix_users_team_created", "team_id", "created_on"),
    # Keyed by user_id itself (no hidden rowid b-tree beside the primary key): one
    # b-tree fewer to write on every command, on SQLite.
    sqlite_with_rowid=False,
)

# The source of truth for erasure deadlines: the sweep selects what is due from here.
pending_erasures = Table(
    "pending_erasures",
    metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("due_at", UTCDateTime, nullable=False, index=True),
    sqlite_with_rowid=False,
)

organizations = Table(
    "organizations",
    metadata,
    Column("org_id", Uuid, primary_key=True),
    Column("name", String(255), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
)

teams = Table(
    "teams",
    metadata,
    Column("team_id", Uuid, primary_key=True),
    Column("org_id", Uuid, nullable=False, index=True),
    Column("name", String(255), nullable=False),
    # The name case-folded (str.casefold) for search_query, on every backend alike.
    Column("name_folded", String(255), nullable=False),
    Column("region", String(8), nullable=False),
    Column("features", JSON, nullable=False),
    # Per environment: {"sandbox": {...}, "production": {...}} (brand information...).
    Column("settings", JSON, nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime),
    Index("ix_teams_org_created", "org_id", "created_on", "team_id"),
)

team_api_keys = Table(
    "team_api_keys",
    metadata,
    Column("key_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False, index=True),
    Column("environment", String(16), nullable=False),
    Column("region", String(8), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
)

connections = Table(
    "connections",
    metadata,
    Column("connection_id", Uuid, primary_key=True),
    Column("user_id", Uuid, nullable=False, index=True),
    Column("team_id", Uuid, nullable=False),
    Column("provider", String(64), nullable=False),
    Column("status", String(20), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("resource_availability", JSON, nullable=False),
    Column("error_details", JSON),
    Column("sealed_external_user_id", Text),
    Column("demo", Boolean, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

management_keys = Table(
    "management_keys",
    metadata,
    Column("key_id", Uuid, primary_key=True),
    Column("org_id", Uuid, nullable=False, index=True),
    Column("role", String(16), nullable=False),
    Column("team_ids", JSON, nullable=False),
    Column("label", String(255), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("created_on", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
)

custom_credentials = Table(
    "custom_credentials",
    metadata,
    # The aggregate's id (derived from team and provider): later events carry only it.
    Column("credentials_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("provider", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("client_id", String(512)),
    # Never returned by any read; kept here only so that the provider adapters can use it.
    Column("sealed_client_secret", Text),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("team_id", "provider", name="uq_custom_credentials_team_provider"),
)

# Link tokens, found by the id in their text; the text itself is only ever hashed.
link_tokens = Table(
    "link_tokens",
    metadata,
    Column("token_id", Uuid, primary_key=True),
    Column("team_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=False),
    Column("environment", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("provider", String(64)),
    Column("redirect_url", Text),
    Column("filter_on_providers", JSON),
    Column("on_error", String(16)),
    Column("on_close", String(16)),
    Column("issued_at", UTCDateTime, nullable=False),
    Column("consumed_at", UTCDateTime),
    Column("consumed_provider", String(64)),
)

READ_MODEL_TABLES = (
    users,
    pending_erasures,
    connections,
    organizations,
    teams,
    team_api_keys,
    management_keys,
    custom_credentials,
    link_tokens,
)
