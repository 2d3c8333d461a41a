"""A team's source priorities (issue 34): the teams read model's order of providers per
kind of data (Team.SourcePrioritiesChanged). A new nullable column: no team has set one
before this revision, so there is nothing to fill in.
Self-contained: no import of the application's schema.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("source_priorities", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("source_priorities")
