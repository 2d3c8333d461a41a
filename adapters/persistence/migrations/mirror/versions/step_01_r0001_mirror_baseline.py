"""Baseline: the webhook receiver's tables, as before migrations.

What `create_all` made up to main at bccbead, written out here rather than taken from
`mirror_metadata`: a later change to the metadata comes with a revision of its own and
never changes what this one creates. A customer database the receiver wrote before
migrations holds exactly these tables and is stamped at this revision.

Revision ID: m0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "m0001"
down_revision = None
branch_labels = None
depends_on = None

# `UTCDateTime` in DDL: DATETIME on SQLite, TIMESTAMP WITH TIME ZONE on PostgreSQL.
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "mirror_stored_events",
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
        sa.UniqueConstraint(
            "originator_id", "originator_version", name="uq_mirror_stored_events_version"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_mirror_stored_events_originator_time",
        "mirror_stored_events",
        ["originator_id", "timestamp"],
    )
    op.create_table(
        "mirror_snapshots",
        sa.Column("originator_id", sa.Uuid(), primary_key=True),
        sa.Column("originator_version", sa.Integer(), primary_key=True),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "mirror_tracking",
        sa.Column("application_name", sa.String(64), primary_key=True),
        sa.Column("notification_id", sa.BigInteger(), primary_key=True, autoincrement=False),
    )
    op.create_table(
        "received_webhooks",
        sa.Column("message_id", sa.String(255), primary_key=True),
        sa.Column("event_type", sa.String(255), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
    )
    op.create_index("ix_received_webhooks_user", "received_webhooks", ["user_id", "received_at"])


def downgrade() -> None:
    # The mirror's event log cannot be rebuilt: there is no going back below the baseline.
    raise RuntimeError("the baseline is not undone: below it there is no schema to go back to")
