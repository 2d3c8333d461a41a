"""Erasure claims: a sweeping process claims a batch of due erasures before it erases them
(ADR 0021).

`pending_erasures.claimed_until`: until when the sweeper that claimed the row may erase
it undisturbed. A sweeper claims its batch in a short transaction of its own (`FOR UPDATE
SKIP LOCKED` on PostgreSQL, so that two sweepers share the due users instead of both
taking them) and the erasure deletes the row; a claim whose time has passed is taken over
by any sweeper (its holder died mid-batch). Nothing to fill in: no erasure is claimed
while the schema is migrated. Self-contained: no import of the application's schema.

Revision ID: 0012
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "pending_erasures", sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("pending_erasures") as batch:
        batch.drop_column("claimed_until")
