"""Event destinations (issue 35): a team's brokers, the publishers' claims on them, and
an index that reads a destination's queue of deliveries in publishing order.

`event_destinations` is a read model of the `EventDestination` streams (none exist before
this revision: nothing to fill in); `event_destination_leases` is not a read model (a
publisher's claim, ADR 0035). Self-contained: no import of the application's schema.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_destinations",
        sa.Column("destination_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("routes", sa.JSON(), nullable=False),
        sa.Column("paused_reason", sa.String(64)),
        sa.Column("created_on", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
    )
    op.create_index(
        "ix_event_destinations_team_env",
        "event_destinations",
        ["team_id", "environment", "created_on"],
    )
    op.create_table(
        "event_destination_leases",
        sa.Column("destination_id", sa.Uuid(), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_webhook_deliveries_queue",
        "webhook_deliveries",
        ["endpoint_id", "status", "log_position"],
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_queue", table_name="webhook_deliveries")
    op.drop_table("event_destination_leases")
    op.drop_index("ix_event_destinations_team_env", table_name="event_destinations")
    op.drop_table("event_destinations")
