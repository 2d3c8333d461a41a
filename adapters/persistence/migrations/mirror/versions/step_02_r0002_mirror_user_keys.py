"""The mirror's key store: a key per mirrored user, so that an upstream erasure is an
erasure in the customer's database too.

The receiver now seals each user's identifiers (its `client_user_id`, the provider's
`external_user_id`) in the mirror's events with a key of that user (`mirror_user_keys`,
wrapped by the receiver's own master key), and destroys the key when a `user.erased`
message arrives. `mirror_master_key_rotations` records each rotation of that master key,
as the service's `master_key_rotations` does. Events stored before keep their form (the log
is not rewritten): nothing to fill in. Self-contained: no import of the receiver's schema
module, which moves on.

Revision ID: m0002
Revises: m0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "m0002"
down_revision = "m0001"
branch_labels = None
depends_on = None

# `UTCDateTime` in DDL: DATETIME on SQLite, TIMESTAMP WITH TIME ZONE on PostgreSQL.
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "mirror_user_keys",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "mirror_master_key_rotations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rotated_at", TIMESTAMP, nullable=False),
        sa.Column("keys_rewrapped", sa.Integer(), nullable=False),
        sa.Column("master_key_id", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    # The keys are what opens the sealed identifiers of every event since this revision:
    # dropping them would erase every mirrored user at once, so going back is refused.
    raise RuntimeError(
        "m0002 is not undone: dropping mirror_user_keys would make every sealed "
        "identifier in the mirror's events unreadable"
    )
