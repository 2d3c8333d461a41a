"""Resource feeds' pull windows and synced days sealed in the log (issue 29 §1, ADR 0032).

`ResourceFeed.PullScheduled` v1 holds a pull's window in clear, `PullSucceeded` v1 the
oldest and newest day the pull found, `DailySynced` v1 the days a sync found new or
changed (and a session's key): on which days a person had health data. Their v2 store
those values sealed with the user's key (the log's mapper, ADR 0032) and name the user
for that. This revision lists the v1 records in `pending_redactions` (revision 0016's
table), which the service's start redacts into v2 (ADR 0028's mechanism): sealed for a
live user, the placeholder for one erased already. A migration has no master key to seal
with (ADR 0017): it only lists them, with a statement, so that the offline SQL lists
them too.

The read model held the same values in clear: `resource_feeds.range_start`, `range_end`,
`oldest_day` and `newest_day`. From this revision it holds the current pull's window as
the log holds it (`sealed_window`, its PullScheduled's sealed value, which the start's
redaction fills for the rows of before), and no data span: the introspection reads the
span from the feed's events, and the scheduler selects by `due_at` and `synced_at` only.
SQLite: secure_delete is on for this transaction, so the dropped values are overwritten
in the file (the start checkpoints the WAL); PostgreSQL: DROP COLUMN leaves the bytes in
the rows, the start's VACUUM FULL rewrites the table. Self-contained: no import of the
application's schema.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

OLD_TOPICS = (
    "healthledger:ResourceFeed.PullScheduled.v1",
    "healthledger:ResourceFeed.PullSucceeded.v1",
    "healthledger:ResourceFeed.DailySynced.v1",
)
DROPPED = ("range_start", "range_end", "oldest_day", "newest_day")


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    topics = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN ({topics}) AND chain_position IS NOT NULL"
    )
    op.add_column("resource_feeds", sa.Column("sealed_window", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    for column in DROPPED:
        op.drop_column("resource_feeds", column)


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics. Records not redacted yet stay listed
    # no more. The rows' windows and spans come back empty (a migration cannot open what
    # is sealed).
    for column, kind in (
        ("range_start", sa.DateTime(timezone=True)),
        ("range_end", sa.DateTime(timezone=True)),
        ("oldest_day", sa.Date()),
        ("newest_day", sa.Date()),
    ):
        op.add_column("resource_feeds", sa.Column(column, kind))
    op.drop_column("resource_feeds", "sealed_window")
    topics = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN ({topics}))"
    )
