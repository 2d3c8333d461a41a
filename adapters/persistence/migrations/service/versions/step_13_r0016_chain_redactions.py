"""Redactions of stored events (ADR 0028): the index of what each redacted record held.

`chain_redactions` holds, per redacted record (by its chain position), what its link
hash covers (its original topic and the SHA-256 of its original state), what it holds now
(its new topic and the SHA-256 of its new state) and the chain position of the redaction
record that says so. Nothing to fill in: the redactions themselves are done at the
service's start, which seals with the users' data keys (a migration has no master key, and
its offline SQL reads nothing back: ADR 0017 decided the same). Self-contained: no import
of the application's schema.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chain_redactions",
        sa.Column("position", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("original_topic", sa.Text(), nullable=False),
        sa.Column("original_digest", sa.LargeBinary(), nullable=False),
        sa.Column("redacted_topic", sa.Text(), nullable=False),
        sa.Column("redacted_digest", sa.LargeBinary(), nullable=False),
        sa.Column("redaction_position", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    # The redacted records keep their new payloads: their old ones are gone for good.
    # Without the index, `verify` of the older version names the first redacted record
    # as changed.
    op.drop_table("chain_redactions")
