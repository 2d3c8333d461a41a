"""When each version of a health data block became the current one (issue 29 §3, `as_of`
on summaries, timeseries and the aggregate query): `began_at`. A read as of an instant
answers the version current then, the one with began_at at or before it and replaced_at
after it (or none); a block whose oldest kept version began after the instant lost the
version of that instant to compaction, and the read says so (a 422).

Filled in for the versions already stored: a later version began when its predecessor was
replaced; one whose predecessor compaction dropped began at the latest when it was last
written (an instant before that is refused, never answered wrongly). A first version is
NULL: it holds everything since the block was made (its days' own stored_at leave out
what came later); from this revision every version records it. Self-contained: no
import of the application's schema.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("health_data", sa.Column("began_at", sa.DateTime(timezone=True)))
    op.execute(
        "UPDATE health_data SET began_at = ("
        "SELECT earlier.replaced_at FROM health_data earlier "
        "WHERE earlier.user_id = health_data.user_id "
        "AND earlier.provider = health_data.provider "
        "AND earlier.resource = health_data.resource "
        "AND earlier.period = health_data.period "
        "AND earlier.version = health_data.version - 1) "
        "WHERE version > 1"
    )
    op.execute(
        "UPDATE health_data SET began_at = written_at WHERE version > 1 AND began_at IS NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("health_data") as batch:
        batch.drop_column("began_at")
