"""The makers' notices' facts sealed in the log (issue 29 §1, ADR 0032).

`NoticeReceipt.Received` v1 holds the maker and the resources a notice named in clear,
and its actor names the maker too (`maker:oura`): which device a person uses, a health
fact. Its v2 stores them sealed with the user's key, recorded by the actor `maker`. This
revision lists the v1 records in `pending_redactions`, which the service's start redacts
into v2 (ADR 0028's mechanism, as revision 0022 does for connections and feeds). The
queue's rows (`maker_notices`) held the maker in clear, read by nothing: the column is
dropped (SQLite: secure_delete on for this transaction, the start's checkpoint;
PostgreSQL: the start's VACUUM FULL after a redaction, or the table's next rewrite).
Self-contained: no import of the application's schema.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

OLD_TOPIC = "healthledger:NoticeReceipt.Received.v1"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic = '{OLD_TOPIC}' AND chain_position IS NOT NULL"
    )
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0016 does.
    op.drop_column("maker_notices", "provider")


def downgrade() -> None:
    # The queue's rows come back with the placeholder (a migration cannot open the sealed
    # receipt); the redacted records keep their sealed payloads.
    op.add_column(
        "maker_notices",
        sa.Column(
            "provider", sa.String(64), nullable=False, server_default="<personal data: erased>"
        ),
    )
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic = '{OLD_TOPIC}')"
    )
