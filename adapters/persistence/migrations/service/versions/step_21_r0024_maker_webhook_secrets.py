"""Our webhooks' signing keys at the makers that hand one out only when the webhook is
made (Polar; issue 31): one row per maker, the key sealed under a service key
(adapters/persistence/keys/maker_webhook_secrets.py). A new table: nothing to fill in
(a key set by hand stays in HEALTHLEDGER_POLAR_WEBHOOK_SIGNATURE_SECRET).
Self-contained: no import of the application's schema.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maker_webhook_secrets",
        sa.Column("provider", sa.String(64), primary_key=True),
        sa.Column("webhook_id", sa.String(255), nullable=False),
        sa.Column("sealed_secret", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("maker_webhook_secrets")
