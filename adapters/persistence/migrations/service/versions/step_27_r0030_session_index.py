"""The session index: a sleep's or a workout's public id to where it is stored (issue 34,
docs/data.md#sessions).

`session_index` holds a row per stored sleep and workout: its id, the user and team in
clear, and the provider, resource, day and session key sealed with the user's key. The
store writes the rows with the sessions. Sessions stored before this revision sit in
sealed blocks that a migration cannot open (it has no master key, ADR 0017): it lists
their users in `session_index_backfill` (from `health_data`, and from the old format's
`health_data_days` that the start converts first), and the service's start indexes them
and unlists them, one user a transaction (`health_data/sessions.py`). Self-contained: no
import of the application's schema.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_index",
        sa.Column("session_id", sa.Uuid(), primary_key=True),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("sealed", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_session_index_user_id", "session_index", ["user_id"])
    op.create_table(
        "session_index_backfill",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
    )
    op.execute(
        "INSERT INTO session_index_backfill (user_id)"
        " SELECT user_id FROM health_data WHERE resource IN ('sleep', 'workouts')"
        " UNION SELECT user_id FROM health_data_days WHERE resource IN ('sleep', 'workouts')"
    )


def downgrade() -> None:
    op.drop_table("session_index_backfill")
    op.drop_index("ix_session_index_user_id", table_name="session_index")
    op.drop_table("session_index")
