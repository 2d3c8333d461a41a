"""Lab test orders (issue 14): the `orders` read model.

One row per order: its statuses, what its answers render, the patient's details and
address and the results sealed with the user's key, and when the simulated lab takes a
sandbox order's next step. Projected from the Order events; nothing to fill in, since no
order was placed before this revision. Deleted and counted by a user's erasure
(`read_model:orders`). Self-contained: no import of the application's schema.

Revision ID: 0007
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("order_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("lab_test_id", sa.Uuid(), nullable=False),
        sa.Column("lab_test_name", sa.String(255), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("collection_method", sa.String(32), nullable=False),
        sa.Column("marker_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("detailed_status", sa.String(96), nullable=False),
        sa.Column("interpretation", sa.String(16)),
        sa.Column("sample_id", sa.String(32)),
        sa.Column("sealed_patient_details", sa.Text(), nullable=False),
        sa.Column("sealed_patient_address", sa.Text(), nullable=False),
        sa.Column("sealed_results", sa.Text()),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_orders_user_id", "orders", ["user_id"])
    op.create_index("ix_orders_team_created", "orders", ["team_id", "created_at", "order_id"])
    op.create_index("ix_orders_due", "orders", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_orders_due", table_name="orders")
    op.drop_index("ix_orders_team_created", table_name="orders")
    op.drop_index("ix_orders_user_id", table_name="orders")
    op.drop_table("orders")
