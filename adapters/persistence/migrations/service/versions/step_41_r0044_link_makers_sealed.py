"""Link tokens' makers sealed in the log and the read model (issue 29 §1, ADR 0032).

A link token names the maker the user is linking (`provider`, `filter_on_providers` of
`LinkToken.Issued` v2) and, once used, the maker connected (`provider` of
`LinkToken.Consumed` v1): health facts (`freestyle_libre`, a glucose monitor, says the
person is diabetic), held in clear. `Issued` v3 and `Consumed` v2 store them sealed with
the user's key (`SEALED_FACTS`). This revision lists the Issued v2 and Consumed v1 records
in `pending_redactions` (revision 0016's table), which the service's start redacts into
the current versions (ADR 0028's mechanism): sealed for a live user, the placeholder for
one erased already (the v1 Issued records revision 0043 listed go straight to v3). A
migration has no master key to seal with (ADR 0017): it only lists them, with a
statement, so that the offline SQL lists them too.

The read model held the same makers in clear: `link_tokens.provider`,
`.filter_on_providers` and `.consumed_provider`. From this revision the row holds them
only as the log does: in `sealed_facts` (the Issued record's, which the start's redaction
refills for the rows of before) and `sealed_consumption` (the Consumed record's). No read
selects tokens by their maker (the row is found by its id), so no keyed digest is kept.
SQLite: secure_delete is on for this transaction, so the dropped values are overwritten in
the file (the start checkpoints the WAL); PostgreSQL: DROP COLUMN leaves the bytes in the
rows, the start's VACUUM FULL rewrites the table. Self-contained: no import of the
application's schema.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None

OLD_TOPICS = ("healthledger:LinkToken.Issued.v2", "healthledger:LinkToken.Consumed.v1")
LISTED = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN ({LISTED}) AND chain_position IS NOT NULL"
    )
    op.add_column("link_tokens", sa.Column("sealed_consumption", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    for column in ("provider", "filter_on_providers", "consumed_provider"):
        op.drop_column("link_tokens", column)


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics. The rows' makers come back empty (a
    # migration cannot open what is sealed): a token lives an hour.
    op.add_column("link_tokens", sa.Column("provider", sa.String(64)))
    op.add_column("link_tokens", sa.Column("filter_on_providers", sa.JSON()))
    op.add_column("link_tokens", sa.Column("consumed_provider", sa.String(64)))
    op.drop_column("link_tokens", "sealed_consumption")
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN ({LISTED}))"
    )
