"""The user's fallback time zone sealed with the user's key, in the log and the read model
(issue 29 §1, ADR 0052).

Until now the zone a team sets on a user (where the person lives) was in clear in
`User.Created` (`fallback_time_zone`), in `User.SettingsChanged` (`changes`) and in the
`users` row (`fallback_time_zone`), so it outlived the user's erasure: in the log for
good, on PostgreSQL in the table's dead rows and the WAL. From this revision the events
hold it sealed (`User.Created` version 4, `sealed_fallback_time_zone`; a change names
`sealed_fallback_time_zone`), and the row holds the log's sealed value
(`sealed_fallback_time_zone`), opened when answered. Its source and time of change stay in
clear beside it, as the birth date's do.

A migration has no master key to seal with (ADR 0017): this revision lists the records
that may hold the zone in clear in `pending_redactions` (every `User.Created` and
`User.SettingsChanged` stored so far: which of them do is in their JSON, read by the
start), and the service's start redacts them (ADR 0028's mechanism, sealed in place: the
same topic, `old_versions.SEALED_IN_PLACE`), the zone sealed with the user's key (or
removed for a user erased already), giving each users row the sealed value in the same
transaction, in the log's order. Until that start has run, a user answers no time zone;
`build_service` runs it before anything reads.

The users' snapshots hold the aggregate's state, the zone in clear with it: they are
deleted (a cache: a user replays from its events, and its next snapshot holds the zone
sealed). SQLite: secure_delete is on for this transaction, so the dropped column and the
deleted snapshots are overwritten in the file (the start checkpoints the WAL);
PostgreSQL: DROP COLUMN and DELETE leave the bytes in the table's file, the start's
VACUUM FULL of `users`, `snapshots` and `stored_events` rewrites them after redacting.
Self-contained: no import of the application's schema.

Revision ID: 0042
Revises: 0041
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None

TOPICS = ("healthledger:User.Created.v1", "healthledger:User.SettingsChanged.v1")
_IN = "(" + ", ".join(f"'{topic}'" for topic in TOPICS) + ")"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN {_IN} AND chain_position IS NOT NULL"
    )
    # The service snapshots users only; the ids are those of the users' streams.
    op.execute(
        "DELETE FROM snapshots WHERE originator_id IN (SELECT originator_id FROM"
        f" stored_events WHERE topic = '{TOPICS[0]}')"
    )
    op.add_column("users", sa.Column("sealed_fallback_time_zone", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+): a batch copy of the table would
    # lose its WITHOUT ROWID (revision 0015).
    op.drop_column("users", "fallback_time_zone")


def downgrade() -> None:
    # The zones cannot come back without the keys (a migration cannot open what is
    # sealed): the column returns empty, its source and time of change with it, and
    # `healthledger rebuild` of the older version cannot fill it either. The redacted
    # records keep their sealed payloads (their old ones are gone for good), which the
    # older version does not read: a downgrade past this revision after a start is not
    # supported (ADR 0052).
    op.add_column("users", sa.Column("fallback_time_zone", sa.String(64)))
    op.execute(
        "UPDATE users SET fallback_time_zone_source = NULL, fallback_time_zone_updated_at = NULL"
    )
    op.drop_column("users", "sealed_fallback_time_zone")
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN {_IN})"
    )
