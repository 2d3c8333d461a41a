"""Link tokens' redirect_url sealed in the log and the read model (issue 29 §1, ADR 0032).

`LinkToken.Issued` v1 holds the token's redirect_url in clear: the team's URL, into which
teams put their own identifiers of the person (`?user=ada@example.org`). Its v2 stores it
sealed with the user's key (`SEALED_FACTS`). This revision lists the v1 records in
`pending_redactions` (revision 0016's table), which the service's start redacts into v2
(ADR 0028's mechanism): sealed for a live user, the placeholder for one erased already. A
migration has no master key to seal with (ADR 0017): it only lists them, with a
statement, so that the offline SQL lists them too.

The read model held the same URL in clear: `link_tokens.redirect_url`. From this revision
it holds the log's sealed value (`sealed_facts`), which the start's redaction fills for
the rows of before. SQLite: secure_delete is on for this transaction, so the dropped
values are overwritten in the file (the start checkpoints the WAL); PostgreSQL: DROP
COLUMN leaves the bytes in the rows, the start's VACUUM FULL rewrites the table.
Self-contained: no import of the application's schema.

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None

OLD_TOPIC = "healthledger:LinkToken.Issued.v1"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic = '{OLD_TOPIC}' AND chain_position IS NOT NULL"
    )
    op.add_column("link_tokens", sa.Column("sealed_facts", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    op.drop_column("link_tokens", "redirect_url")


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics. The rows' redirect URLs come back
    # empty (a migration cannot open what is sealed): a token lives an hour.
    op.add_column("link_tokens", sa.Column("redirect_url", sa.Text()))
    op.drop_column("link_tokens", "sealed_facts")
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic = '{OLD_TOPIC}')"
    )
