"""Unmatched lab results (issue 33, ADR 0040): the `unmatched_results` read model, one
row per result that arrived without an order, for the team's listing. No result existed
before this revision: the table starts empty. Self-contained: no import of the
application's schema.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "unmatched_results",
        sa.Column("result_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("environment", sa.String(16), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("decision_code", sa.String(64), nullable=False),
        sa.Column("lab_id", sa.Integer(), nullable=False),
        sa.Column("sealed_result", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index(
        "ix_unmatched_results_team_created",
        "unmatched_results",
        ["team_id", "created_at", "result_id"],
    )


def downgrade() -> None:
    # The results stay in the log (their streams): a later upgrade's rebuild lists them.
    op.drop_index("ix_unmatched_results_team_created", table_name="unmatched_results")
    op.drop_table("unmatched_results")
