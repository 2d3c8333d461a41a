"""Provider tokens: the maker's tokens of each OAuth connection (ADR 0022).

One row per connection made by a maker's OAuth flow: the access and refresh tokens,
sealed together under the user's data key (never in clear), the access token's expiry,
the OAuth client that obtained them and a version that a refresh compares and sets. The
rows are written in the transaction that records the connection, replaced by refreshes,
and deleted when the connection is deregistered and by the user's erasure, which counts
and checks them (`provider_tokens` in its places). Nothing to fill in: no connection was
made by OAuth before this revision. Self-contained: no import of the application's schema.

Revision ID: 0013
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "provider_tokens",
        sa.Column("connection_id", sa.Uuid(), primary_key=True),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("client_id", sa.String(512), nullable=False),
        sa.Column("sealed_tokens", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("refreshed_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_provider_tokens_user_id", "provider_tokens", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_provider_tokens_user_id", table_name="provider_tokens")
    op.drop_table("provider_tokens")
