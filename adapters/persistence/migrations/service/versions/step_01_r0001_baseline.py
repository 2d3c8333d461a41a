"""Baseline: the service's tables, as before migrations.

What `create_all` made up to main at bccbead, written out here rather than taken from
`schema.metadata`: a later change to the metadata comes with a revision of its own and
never changes what this one creates. A database written before migrations holds exactly
these tables and is stamped at this revision.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The column types the schema's types make in DDL: `UTCDateTime` is a DateTime with time
# zone (DATETIME on SQLite, TIMESTAMP WITH TIME ZONE on PostgreSQL), `Uuid` is CHAR(32) on
# SQLite and UUID on PostgreSQL.
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    # -- the event store -----------------------------------------------------------------
    op.create_table(
        "stored_events",
        sa.Column(
            "notification_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("originator_id", sa.Uuid(), nullable=False),
        sa.Column("originator_version", sa.Integer(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("timestamp", TIMESTAMP, nullable=False),
        sa.UniqueConstraint("originator_id", "originator_version", name="uq_stored_events_version"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stored_events_originator_time", "stored_events", ["originator_id", "timestamp"]
    )
    op.create_table(
        "snapshots",
        sa.Column("originator_id", sa.Uuid(), primary_key=True),
        sa.Column("originator_version", sa.Integer(), primary_key=True),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "tracking",
        sa.Column("application_name", sa.String(64), primary_key=True),
        sa.Column("notification_id", sa.BigInteger(), primary_key=True, autoincrement=False),
    )

    # -- the key store -------------------------------------------------------------------
    op.create_table(
        "user_data_keys",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )

    # -- read models and stored data -----------------------------------------------------
    op.create_table(
        "users",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("client_user_id", sa.String(255), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("fallback_time_zone", sa.String(64)),
        sa.Column("fallback_time_zone_source", sa.String(64)),
        sa.Column("fallback_time_zone_updated_at", TIMESTAMP),
        sa.Column("sealed_birth_date", sa.Text()),
        sa.Column("birth_date_source", sa.String(64)),
        sa.Column("birth_date_updated_at", TIMESTAMP),
        sa.Column("ingestion_start", sa.Date()),
        sa.Column("ingestion_end", sa.Date()),
        sa.Column("sealed_demographics", sa.Text()),
        sa.Column("demographics_updated_at", TIMESTAMP),
        sa.Column("deleted_at", TIMESTAMP),
        sa.Column("erasure_due_at", TIMESTAMP),
        sa.Column("version", sa.Integer(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_users_team_client_user_id", "users", ["team_id", "client_user_id"])
    op.create_index("ix_users_team_created", "users", ["team_id", "created_on"])
    op.create_table(
        "pending_erasures",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("due_at", TIMESTAMP, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_pending_erasures_due_at", "pending_erasures", ["due_at"])
    op.create_table(
        "organizations",
        sa.Column("org_id", sa.Uuid(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "teams",
        sa.Column("team_id", sa.Uuid(), primary_key=True),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_folded", sa.String(255), nullable=False),
        sa.Column("region", sa.String(8), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("deleted_at", TIMESTAMP),
    )
    op.create_index("ix_teams_org_id", "teams", ["org_id"])
    op.create_index("ix_teams_org_created", "teams", ["org_id", "created_on", "team_id"])
    op.create_table(
        "team_api_keys",
        sa.Column("key_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("region", sa.String(8), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP),
    )
    op.create_index("ix_team_api_keys_team_id", "team_api_keys", ["team_id"])
    op.create_table(
        "connections",
        sa.Column("connection_id", sa.Uuid(), primary_key=True),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("resource_availability", sa.JSON(), nullable=False),
        sa.Column("error_details", sa.JSON()),
        sa.Column("sealed_external_user_id", sa.Text()),
        sa.Column("demo", sa.Boolean(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
    )
    op.create_index("ix_connections_user_id", "connections", ["user_id"])
    op.create_table(
        "management_keys",
        sa.Column("key_id", sa.Uuid(), primary_key=True),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("team_ids", sa.JSON(), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP),
    )
    op.create_index("ix_management_keys_org_id", "management_keys", ["org_id"])
    op.create_table(
        "custom_credentials",
        sa.Column("credentials_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("client_id", sa.String(512)),
        sa.Column("sealed_client_secret", sa.Text()),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.UniqueConstraint("team_id", "provider", name="uq_custom_credentials_team_provider"),
    )
    op.create_table(
        "link_tokens",
        sa.Column("token_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("provider", sa.String(64)),
        sa.Column("redirect_url", sa.Text()),
        sa.Column("filter_on_providers", sa.JSON()),
        sa.Column("on_error", sa.String(16)),
        sa.Column("on_close", sa.String(16)),
        sa.Column("issued_at", TIMESTAMP, nullable=False),
        sa.Column("consumed_at", TIMESTAMP),
        sa.Column("consumed_provider", sa.String(64)),
    )
    op.create_table(
        "resource_feeds",
        sa.Column("feed_id", sa.Uuid(), primary_key=True),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("resource", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16)),
        sa.Column("range_start", TIMESTAMP),
        sa.Column("range_end", TIMESTAMP),
        sa.Column("scheduled_at", TIMESTAMP),
        sa.Column("started_at", TIMESTAMP),
        sa.Column("ended_at", TIMESTAMP),
        sa.Column("days_with_data", sa.Integer(), nullable=False),
        sa.Column("release", sa.String(16)),
        sa.Column("trace_id", sa.String(32)),
        sa.Column("error_code", sa.String(64)),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", TIMESTAMP),
        sa.Column("last_attempt_at", TIMESTAMP),
        sa.Column("last_attempt_status", sa.String(16)),
        sa.Column("oldest_day", sa.Date()),
        sa.Column("newest_day", sa.Date()),
        sa.Column("synced_at", TIMESTAMP),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_resource_feeds_user_id", "resource_feeds", ["user_id"])
    op.create_index("ix_resource_feeds_due", "resource_feeds", ["due_at"])
    op.create_index("ix_resource_feeds_synced", "resource_feeds", ["status", "synced_at"])
    op.create_table(
        "health_data",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("resource", sa.String(64), primary_key=True),
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("stored_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "webhook_endpoints",
        sa.Column("endpoint_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("filter_types", sa.JSON(), nullable=False),
        sa.Column("disabled_reason", sa.String(64)),
        sa.Column("sealed_secret", sa.Text(), nullable=False),
        sa.Column("sealed_previous_secret", sa.Text()),
        sa.Column("previous_secret_expires_at", TIMESTAMP),
        sa.Column("created_on", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
    )
    op.create_index(
        "ix_webhook_endpoints_team_env",
        "webhook_endpoints",
        ["team_id", "environment", "created_on"],
    )
    op.create_table(
        "deprecation_cut_overs",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("effective_on", sa.Date(), nullable=False),
        sa.Column("what", sa.Text(), nullable=False),
        sa.Column("applied_at", TIMESTAMP, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.Uuid(), primary_key=True),
        sa.Column("endpoint_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("source_id", sa.Uuid(), nullable=False),
        sa.Column("source_version", sa.Integer(), nullable=False),
        sa.Column("source_timestamp", TIMESTAMP, nullable=False),
        sa.Column("day", sa.Date()),
        sa.Column("log_position", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TIMESTAMP),
        sa.Column("last_attempt_at", TIMESTAMP),
        sa.Column("last_status_code", sa.Integer()),
        sa.Column("first_failure_at", TIMESTAMP),
        sa.Column("succeeded_at", TIMESTAMP),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.create_index(
        "ix_webhook_deliveries_endpoint",
        "webhook_deliveries",
        ["endpoint_id", "source_timestamp"],
    )


def downgrade() -> None:
    # The event log, the key store and the health data cannot be rebuilt: there is no
    # going back below the baseline.
    raise RuntimeError("the baseline is not undone: below it there is no schema to go back to")
