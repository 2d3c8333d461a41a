"""Continuous queries and their runs (issue 34, ADR 0044): `continuous_queries` (a team's
aggregate query for one user, its interval and its latest result, sealed with the user's
key) and `continuous_query_tasks` (each run: scheduled, started, completed or error, and
the lease of the worker running it). New tables only. Self-contained: no import of the
application's schema.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "continuous_queries",
        sa.Column("query_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("slug", sa.String(64), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("interval_minutes", sa.Integer(), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("sealed_result", sa.Text()),
        sa.Column("result_at", _utc()),
        sa.UniqueConstraint("user_id", "slug", name="uq_continuous_queries_user_slug"),
    )
    op.create_index("ix_continuous_queries_team_user", "continuous_queries", ["team_id", "user_id"])
    op.create_table(
        "continuous_query_tasks",
        sa.Column("task_id", sa.Uuid(), primary_key=True),
        sa.Column("query_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("scheduled_at", _utc(), nullable=False),
        sa.Column("started_at", _utc()),
        sa.Column("ended_at", _utc()),
        sa.Column("error_details", sa.Text()),
        sa.Column("holder", sa.String(64)),
        sa.Column("lease_expires_at", _utc()),
    )
    op.create_index(
        "ix_continuous_query_tasks_due", "continuous_query_tasks", ["status", "scheduled_at"]
    )
    op.create_index(
        "ix_continuous_query_tasks_query", "continuous_query_tasks", ["query_id", "scheduled_at"]
    )
    op.create_index("ix_continuous_query_tasks_user", "continuous_query_tasks", ["user_id"])


def downgrade() -> None:
    op.drop_table("continuous_query_tasks")
    op.drop_table("continuous_queries")
