"""Grant revocations (issue 28, deregistration): a deregistered connection's tokens stay,
owed a revocation at the maker, until it is done or given up.

`provider_tokens.revoke_due_at` is set by a deregistration (NULL: the tokens of a live
connection period), `revoke_attempts` counts the failed attempts
(domain/connections/revocation.py). Nothing to fill in: the tokens of connections
deregistered before this revision were deleted with their deregistration.
Self-contained: no import of the application's schema.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("provider_tokens", sa.Column("revoke_due_at", sa.DateTime(timezone=True)))
    op.add_column(
        "provider_tokens",
        sa.Column("revoke_attempts", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_provider_tokens_revoke_due_at", "provider_tokens", ["revoke_due_at"])


def downgrade() -> None:
    op.drop_index("ix_provider_tokens_revoke_due_at", table_name="provider_tokens")
    op.drop_column("provider_tokens", "revoke_attempts")
    op.drop_column("provider_tokens", "revoke_due_at")
