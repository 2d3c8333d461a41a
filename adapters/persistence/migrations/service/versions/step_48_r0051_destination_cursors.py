"""Event destinations follow the log by a cursor of their own (ADR 0055): the cursors'
read model. (A round's users find it by `stream_owners`, kind `publish_round`.)

Each destination of before gets its cursor here. Its position (the event store's
`tracking` row the cursor names) is just before the least log position of its deliveries
still pending (those are then published by the cursor, under the same keyed message ids;
the service's start records them dropped, superseded), or its last delivery's position
when none is pending, or none when it had no delivery (it starts at its creation). A
message published already past that position is published again: JetStream drops it
within its duplicate window, a consumer by `message_id`. Self-contained: no import of
the application's schema.

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None

# `publish_rounds.tracking_name_of`: "destination:" and the id's 32 hex digits, in the
# database's SQL (SQLite holds a uuid as those digits already), so that the offline SQL
# writes it too.
TRACKING_NAME = {
    "sqlite": "'destination:' || lower(e.destination_id)",
    "postgresql": "'destination:' || replace(e.destination_id::text, '-', '')",
}
# Where each destination of before starts: before its first pending delivery, else at
# its last delivery (NULL: none, it starts at its creation).
START = """
COALESCE(
    (SELECT MIN(d.log_position) - 1 FROM webhook_deliveries d
     WHERE d.endpoint_id = e.destination_id AND d.status = 'pending'),
    (SELECT MAX(d.log_position) FROM webhook_deliveries d
     WHERE d.endpoint_id = e.destination_id)
)
"""


def upgrade() -> None:
    op.create_table(
        "event_destination_cursors",
        sa.Column("destination_id", sa.Uuid(), primary_key=True),
        sa.Column("tracking_name", sa.String(64), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("acknowledged_past", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failing_since", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.String(128)),
    )
    name = TRACKING_NAME[op.get_context().dialect.name]
    op.execute(
        "INSERT INTO event_destination_cursors"
        " (destination_id, tracking_name, rounds, acknowledged_past, attempts, next_attempt_at)"
        f" SELECT e.destination_id, {name}, 0, '[]', 0, e.created_on FROM event_destinations e"
    )
    op.execute(
        "INSERT INTO tracking (application_name, notification_id)"
        f" SELECT {name}, {START} FROM event_destinations e WHERE {START} IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DELETE FROM tracking WHERE application_name LIKE 'destination:%'")
    op.drop_table("event_destination_cursors")
