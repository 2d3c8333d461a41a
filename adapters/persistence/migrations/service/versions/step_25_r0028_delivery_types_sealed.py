"""Webhook deliveries' event types sealed in the log (issue 29 §1, ADR 0028).

`WebhookDelivery.Created` v1 holds the delivery's event type in clear
(`labtest.result.critical`, `historical.data.glucose.created`): which health data was
announced about the person. Its v2 stores the type sealed with the user's key, and in
clear only a type that says nothing of a person's health (`lifecycle_type`: `user.*`,
and a team-level type, about no user: revision 0026). This revision lists the v1
records in `pending_redactions` (revision 0016's table), which the service's start
redacts into v2 (ADR 0028's mechanism): sealed for a live user, the placeholder for one
erased already. A migration has no master key to seal with (ADR 0017): it only lists
them, with a statement, so that the offline SQL lists them too.

The read model held the same type in clear: `webhook_deliveries.event_type`. From this
revision it holds the log's sealed value (`sealed_facts`), which the start's redaction
fills for the rows of before, and `lifecycle_type`, filled here for the `user.*` rows and
the team-level ones. SQLite: secure_delete is on for this transaction, so the dropped
values are overwritten in the file (the start checkpoints the WAL); PostgreSQL: DROP
COLUMN leaves the bytes in the rows, the start's VACUUM FULL rewrites the table.
Self-contained: no import of the application's schema.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

OLD_TOPIC = "healthledger:WebhookDelivery.Created.v1"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic = '{OLD_TOPIC}' AND chain_position IS NOT NULL"
    )
    op.add_column("webhook_deliveries", sa.Column("sealed_facts", sa.Text()))
    op.add_column("webhook_deliveries", sa.Column("lifecycle_type", sa.String(128)))
    op.execute(
        "UPDATE webhook_deliveries SET lifecycle_type = event_type"
        " WHERE event_type LIKE 'user.%' OR user_id IS NULL"
    )
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    op.drop_column("webhook_deliveries", "event_type")


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics. The rows' types come back as the
    # erased placeholder but for the lifecycle's (a migration cannot open what is sealed).
    op.add_column(
        "webhook_deliveries",
        sa.Column(
            "event_type",
            sa.String(128),
            nullable=False,
            server_default="<personal data: erased>",
        ),
    )
    op.execute(
        "UPDATE webhook_deliveries SET event_type = lifecycle_type WHERE lifecycle_type IS NOT NULL"
    )
    op.drop_column("webhook_deliveries", "lifecycle_type")
    op.drop_column("webhook_deliveries", "sealed_facts")
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic = '{OLD_TOPIC}')"
    )
