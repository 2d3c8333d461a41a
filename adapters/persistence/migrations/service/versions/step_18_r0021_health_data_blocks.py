"""Health data in sealed columnar blocks (issue 32, ADR 0033).

`health_data` held one sealed base64 text of canonical JSON per (user, provider,
resource, day). From this revision it holds blocks: a calendar month of one (user,
provider, resource) in typed columns, sealed as bytes, one row per version. The days
stored before are kept in `health_data_days` (the old table, renamed): the migration
cannot open them (it has no master key), so the service's start converts them into
blocks and deletes them, resumably (`health_data/conversion.py`). Self-contained: no
import of the application's schema.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.rename_table("health_data", "health_data_days")
    if op.get_context().dialect.name == "postgresql":
        # The primary key's name goes with the table: free it for the new one.
        op.execute(
            "ALTER TABLE health_data_days "
            "RENAME CONSTRAINT health_data_pkey TO health_data_days_pkey"
        )
    op.create_table(
        "health_data",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("resource", sa.String(64), primary_key=True),
        sa.Column("period", sa.Date(), primary_key=True),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("written_at", TIMESTAMP, nullable=False),
        sa.Column("replaced_at", TIMESTAMP),
    )
    op.create_index(
        "ix_health_data_user_resource", "health_data", ["user_id", "resource", "period"]
    )


def downgrade() -> None:
    # The blocks cannot be turned back into days without the master key: a downgrade
    # keeps the days not yet converted and drops the blocks.
    op.drop_index("ix_health_data_user_resource", "health_data")
    op.drop_table("health_data")
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE health_data_days "
            "RENAME CONSTRAINT health_data_days_pkey TO health_data_pkey"
        )
    op.rename_table("health_data_days", "health_data")
