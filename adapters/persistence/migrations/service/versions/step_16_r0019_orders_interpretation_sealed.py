"""The orders read model's interpretation sealed (issue 29 §1, ADR 0028).

`orders.interpretation` held the results' interpretation (normal, abnormal, critical) in
clear, opened by the projection so that listings could filter on it: a health fact about
the user. From this revision the row holds it sealed with the user's key
(`sealed_interpretation`, the Completed event's own sealed value) and as the service's
keyed digest of (team, value) (`interpretation_digest`), which the listing's filter
compares. The events always held it sealed: nothing in the log changes.

The migration does not fill the new columns: it has no master key to open the value
and digest it (ADR 0017). The service's start does, from the orders' Completed events,
then leaves no copy of the dropped column (SQLite: secure_delete on for this
transaction, and the start's checkpoint; PostgreSQL: DROP COLUMN leaves the bytes in the
rows, the start's VACUUM FULL rewrites the table). Self-contained: no import of the
application's schema.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.add_column("orders", sa.Column("sealed_interpretation", sa.Text()))
    op.add_column("orders", sa.Column("interpretation_digest", sa.String(64)))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    op.drop_column("orders", "interpretation")


def downgrade() -> None:
    # The interpretations come back empty: a migration cannot open what is sealed (a
    # rebuild of the older version fills them).
    op.add_column("orders", sa.Column("interpretation", sa.String(16)))
    op.drop_column("orders", "interpretation_digest")
    op.drop_column("orders", "sealed_interpretation")
