"""Health data's and raw payloads' provider and resource held as keyed digests, and raw
payloads' months dropped (issue 29 §1, ADR 0047).

`health_data` and `raw_payloads` held each row's provider and resource in clear beside
the user's id: which maker a person has (a glucose monitor) and what was pulled are
health facts. From this revision their rows hold keyed digests of the names under the
user's key (`health_data/places.py`), in the same columns: no column changes. A migration
has no master key (ADR 0017): this revision lists the users with rows in
`place_digest_backfill`, and the service's start keys their rows and unlists them, one
user a transaction, before anything reads.

`raw_payloads` also held the months of each kept pull's first and last day in clear
(`period`, `last_period`: when the person had data at the maker); its window is sealed
in the row already, so the columns go, and the index on (user, resource, period) is
remade on (user, resource). Self-contained: no import of the application's schema.

Revision ID: 0039
Revises: 0038
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "place_digest_backfill",
        sa.Column("user_id", sa.Uuid(), primary_key=True),
    )
    op.execute(
        "INSERT INTO place_digest_backfill (user_id)"
        " SELECT user_id FROM health_data UNION SELECT user_id FROM raw_payloads"
    )
    op.drop_index("ix_raw_payloads_user_resource", table_name="raw_payloads")
    with op.batch_alter_table("raw_payloads") as batch:
        batch.drop_column("period")
        batch.drop_column("last_period")
    op.create_index("ix_raw_payloads_user_resource", "raw_payloads", ["user_id", "resource"])


def downgrade() -> None:
    # Rows keyed already stay keyed (the older version no longer finds them by name: a
    # downgrade after the start has keyed them loses their reads, not their data). The
    # months cannot be told without the key: every kept pull is said to span all of
    # them, so the older version opens each window and filters by it, as it does anyway.
    op.drop_index("ix_raw_payloads_user_resource", table_name="raw_payloads")
    with op.batch_alter_table("raw_payloads") as batch:
        batch.add_column(
            sa.Column("period", sa.Date(), nullable=False, server_default="0001-01-01")
        )
        batch.add_column(
            sa.Column("last_period", sa.Date(), nullable=False, server_default="9999-12-01")
        )
    op.create_index(
        "ix_raw_payloads_user_resource", "raw_payloads", ["user_id", "resource", "period"]
    )
    op.drop_table("place_digest_backfill")
