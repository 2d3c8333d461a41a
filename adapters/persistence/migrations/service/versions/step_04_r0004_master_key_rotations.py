"""Master key rotations, and the indexes an erasure counts by.

`master_key_rotations` records each rotation of the master key (`healthledger keys
rotate-master`, or the scheduler's): when, how many data keys it rewrapped, and the id of
the new key (a keyed digest, never the key). A process still holding the previous key
reads it to know it must load the new one; a deletion report reads it for an erasure's
horizon (the first rotation after the erasure).

An erasure now deletes the user's link tokens and drops the webhook deliveries still
queued about it, counting both in its transaction: `link_tokens.user_id` and
`webhook_deliveries (user_id, status)` get indexes, so that neither is a scan of the
whole table per erased user. Self-contained: no import of the application's schema.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "master_key_rotations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("keys_rewrapped", sa.Integer(), nullable=False),
        sa.Column("master_key_id", sa.String(16), nullable=False),
    )
    op.create_index("ix_link_tokens_user_id", "link_tokens", ["user_id"])
    op.create_index("ix_webhook_deliveries_user", "webhook_deliveries", ["user_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_user", table_name="webhook_deliveries")
    op.drop_index("ix_link_tokens_user_id", table_name="link_tokens")
    op.drop_table("master_key_rotations")
