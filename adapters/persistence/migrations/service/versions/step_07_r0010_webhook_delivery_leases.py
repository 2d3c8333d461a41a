"""Webhook delivery leases: a sender claims a due delivery before it posts it (ADR 0019).

One row per delivery being sent: which process holds it and until when. A sender takes
the row in a short transaction of its own before the POST (`FOR UPDATE SKIP LOCKED` on
the delivery on PostgreSQL, so that two senders share the work instead of both taking
it), and deletes it once the attempt is recorded; a row whose time has passed is taken
over by any sender (its holder died mid-send). Nothing to fill in: no delivery is being
sent while the schema is migrated. Self-contained: no import of the application's
schema.

Revision ID: 0010
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_delivery_leases",
        sa.Column("delivery_id", sa.Uuid(), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_delivery_leases")
