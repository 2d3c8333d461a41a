"""Lab tests: the read model of teams' lab tests (domain/labs/lab_tests.py).

One row per `LabTest.Created`: the team, name, description, collection method, lab and
marker ids. Nothing to fill in: no lab test was created before this revision (a rebuild
would make the rows from the log anyway). Self-contained: no import of the application's
schema.

Revision ID: 0006
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lab_tests",
        sa.Column("lab_test_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.Text()),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("marker_ids", sa.JSON(), nullable=False),
        sa.Column("fasting", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_lab_tests_team_created", "lab_tests", ["team_id", "created_at", "lab_test_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_lab_tests_team_created", table_name="lab_tests")
    op.drop_table("lab_tests")
