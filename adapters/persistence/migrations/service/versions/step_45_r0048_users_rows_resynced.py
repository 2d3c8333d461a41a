"""The users rows whose sealed values an earlier start gave under another nonce than the
log's: listed for the start to take the log's own (ADR 0054).

Revision 0042's redaction of the old `User.Created` (and, before revision 0046's code gave
the row the record's value, revision 0046's of the old `User.ClientUserIdChanged`) sealed
the client_user_id into the record, and left the users row the value that revision 0015's
conversion or the projection had sealed apart: the same value under another nonce. A
rebuild from the log makes the row with the log's ciphertext, so `verify --read-models`
and the daily integrity check named each such row as differing: a false alarm.

A migration has no key to tell a same value from another: this revision lists the users
(with a row) whose stream holds a redacted `User.Created`, `User.ClientUserIdChanged` or
`User.SettingsChanged` (the time zone's, for the same reason) in `user_row_resyncs`; the
service's start gives each listed row the log's sealed client_user_id and time zone where
the row's own opens to the same value, and empties the table
(`projections/users.py`, `resync_sealed_values`). A row holding another value is left as
it is, for the check to name. Self-contained: no import of the application's schema.

Revision ID: 0048
Revises: 0047
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None

# The topics of the records a start redacted in place that set a users row's sealed
# values (the topic names the stream's first class version, whatever the record's).
TOPICS = (
    "healthledger:User.Created.v1",
    "healthledger:User.ClientUserIdChanged.v1",
    "healthledger:User.SettingsChanged.v1",
)


def upgrade() -> None:
    op.create_table("user_row_resyncs", sa.Column("user_id", sa.Uuid(), primary_key=True))
    listed = ", ".join(f"'{topic}'" for topic in TOPICS)
    op.execute(
        "INSERT INTO user_row_resyncs (user_id) SELECT DISTINCT e.originator_id"
        " FROM stored_events e JOIN chain_redactions r ON r.position = e.chain_position"
        f" WHERE e.topic IN ({listed})"
        " AND e.originator_id IN (SELECT user_id FROM users)"
    )


def downgrade() -> None:
    # The rows given the log's values stay so: the same values, as a rebuild makes them.
    op.drop_table("user_row_resyncs")
