"""Orders' activation dates: the `orders` read model's `activate_by`, the day an order
placed with one is to be dispatched to the lab (`Order.Created` version 2,
`Order.ActivationRescheduled`; ADR 0041). Every order placed before was placed for
immediate processing: NULL, as the projection writes for them.

Self-contained: no import of the application's schema.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("orders", sa.Column("activate_by", sa.Date(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("orders") as batch:
        batch.drop_column("activate_by")
