"""Orders found by their test kit's sample id: an index on the `orders` read model's
(team_id, sample_id), which a kit's registration looks its order up by
(`OrderQueries.kit_order`); without it the lookup read every order of the team.

Self-contained: no import of the application's schema.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_orders_team_sample", "orders", ["team_id", "sample_id"])


def downgrade() -> None:
    op.drop_index("ix_orders_team_sample", table_name="orders")
