"""A webhook delivery may be about no user: a team-level event type
(`event_destination.disabled`, issue 35) is delivered to a team environment's endpoints,
so `webhook_deliveries.user_id` is nullable. Every stored row keeps its user.
Self-contained: no import of the application's schema.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.alter_column("user_id", existing_type=sa.Uuid(), nullable=True)


def downgrade() -> None:
    # A team-level delivery names no user: those rows cannot stay (their streams do).
    op.execute("DELETE FROM webhook_deliveries WHERE user_id IS NULL")
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.alter_column("user_id", existing_type=sa.Uuid(), nullable=False)
