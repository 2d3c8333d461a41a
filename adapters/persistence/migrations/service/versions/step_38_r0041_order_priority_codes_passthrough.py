"""What an order is placed with beside its test and patient (`Order.Created` version 3):
the `orders` read model's `priority` (a STAT order, in clear), `sealed_icd_codes` (its
diagnoses, ICD-10-CM codes sealed with the user's key) and `sealed_passthrough` (the
team's own string, sealed). Every order placed before was placed without them: routine
(false), none, none; as the projection writes for their events.

Self-contained: no import of the application's schema.

Revision ID: 0041
Revises: 0040
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "orders", sa.Column("priority", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("orders", sa.Column("sealed_icd_codes", sa.Text(), nullable=True))
    op.add_column("orders", sa.Column("sealed_passthrough", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("orders") as batch:
        batch.drop_column("sealed_passthrough")
        batch.drop_column("sealed_icd_codes")
        batch.drop_column("priority")
