"""Connections' and resource feeds' facts sealed in the log (issue 29 §1, ADR 0032).

`Connection.Created` v1 and `Connection.Reconnected` v1 hold the connection's provider
and resource availability in clear, `ResourceFeed.Created` v1 the feed's provider and
resource: which device a person uses and what it measures (a glucose monitor), health
facts about them. Their v2 store those facts sealed with the user's key. This revision
lists the v1 records in `pending_redactions` (revision 0016's table), which the
service's start redacts into v2 (ADR 0028's mechanism): sealed for a live user, the
placeholder for one erased already. A migration has no master key to seal with (ADR
0017): it only lists them, with a statement, so that the offline SQL lists them too.

The read models held the same facts in clear: `connections.provider` and
`resource_availability`, `resource_feeds.provider` and `resource`. From this revision they
hold the log's sealed values (`sealed_facts`, and `sealed_availability` for a
reconnection), which the start's redaction fills for the rows of before, and the
connections a keyed `provider_digest` of (team, provider), which the start fills after
(`fill_connection_digests`). SQLite: secure_delete is on for this transaction, so the
dropped values are overwritten in the file (the start checkpoints the WAL); PostgreSQL:
DROP COLUMN leaves the bytes in the rows, the start's VACUUM FULL rewrites the tables.
Self-contained: no import of the application's schema.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

OLD_TOPICS = (
    "healthledger:Connection.Created.v1",
    "healthledger:Connection.Reconnected.v1",
    "healthledger:ResourceFeed.Created.v1",
)


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    topics = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN ({topics}) AND chain_position IS NOT NULL"
    )
    op.add_column("connections", sa.Column("sealed_facts", sa.Text()))
    op.add_column("connections", sa.Column("sealed_availability", sa.Text()))
    op.add_column("connections", sa.Column("provider_digest", sa.String(64)))
    op.create_index("ix_connections_provider_digest", "connections", ["provider_digest"])
    op.add_column("resource_feeds", sa.Column("sealed_facts", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    for table, columns in (
        ("connections", ("provider", "resource_availability")),
        ("resource_feeds", ("provider", "resource")),
    ):
        for column in columns:
            op.drop_column(table, column)


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics. Records not redacted yet stay listed
    # no more. The rows' facts come back as the erased placeholder (a migration cannot
    # open what is sealed; a rebuild of the older version cannot read the new topics).
    erased = "<personal data: erased>"
    for table, column, kind, default in (
        ("connections", "provider", sa.String(64), erased),
        ("connections", "resource_availability", sa.JSON(), "{}"),
        ("resource_feeds", "provider", sa.String(64), erased),
        ("resource_feeds", "resource", sa.String(64), erased),
    ):
        op.add_column(table, sa.Column(column, kind, nullable=False, server_default=default))
    op.drop_column("resource_feeds", "sealed_facts")
    op.drop_index("ix_connections_provider_digest", table_name="connections")
    for column in ("provider_digest", "sealed_availability", "sealed_facts"):
        op.drop_column("connections", column)
    topics = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN ({topics}))"
    )
