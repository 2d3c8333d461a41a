"""The makers' own payloads as received (issue 34, `*.get_raw`; ADR 0046): `raw_payloads`,
a row per pull of one user's provider and resource and window of days, the maker's
answers and the window each sealed under the user's key as bytes. A new table only.
Self-contained: no import of the application's schema.

Revision ID: 0038
Revises: 0037
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "raw_payloads",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("resource", sa.String(64), primary_key=True),
        sa.Column("slot", sa.String(64), primary_key=True),
        sa.Column("period", sa.Date(), nullable=False),
        sa.Column("last_period", sa.Date(), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window", sa.LargeBinary(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
    )
    op.create_index(
        "ix_raw_payloads_user_resource", "raw_payloads", ["user_id", "resource", "period"]
    )


def downgrade() -> None:
    op.drop_index("ix_raw_payloads_user_resource", table_name="raw_payloads")
    op.drop_table("raw_payloads")
