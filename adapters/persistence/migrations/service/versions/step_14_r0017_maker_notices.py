"""The makers' webhooks in (issue 28, ADR 0031): connections found by a keyed digest of
the maker's account id, and the queue of notices not handled yet.

`connections.account_digest` (indexed) holds HMAC-SHA256 of (provider, the maker's
account id) under the service's account-digest key. The migration does not fill it for
the rows written before: the account id is sealed with each person's key, and the
digest's key is in the key store, neither of which a migration can open (it gets a
database URL and nothing else, and runs as offline SQL too). The service's start fills
them (`projections/connections.py` `fill_account_digests`, called by `build_service`);
until then a maker's notice about such a connection is acknowledged and dropped as an
unknown account.

`maker_notices` holds one row per notice recorded and not handled yet: the pull
worker's queue. Nothing to fill in: no notice was recorded before this revision.
Self-contained: no import of the application's schema.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("connections", sa.Column("account_digest", sa.String(64)))
    op.create_index("ix_connections_account_digest", "connections", ["account_digest"])
    op.create_table(
        "maker_notices",
        sa.Column("notice_id", sa.Uuid(), primary_key=True),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_maker_notices_due_at", "maker_notices", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_maker_notices_due_at", table_name="maker_notices")
    op.drop_table("maker_notices")
    op.drop_index("ix_connections_account_digest", table_name="connections")
    op.drop_column("connections", "account_digest")
