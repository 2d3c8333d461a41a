"""Redactions of stored events (ADR 0028): the index of what each redacted record held,
and the orders read model's lab test sealed.

`chain_redactions` holds, per redacted record (by its chain position), what its link
hash covers (its original topic and the SHA-256 of its original state), what it holds now
(its new topic and the SHA-256 of its new state) and the chain position of the redaction
record that says so. `pending_redactions` lists the records the start has to redact:
the orders' Created events of version 1.

`orders` held the test ordered in clear (`lab_test_id`, `lab_test_name`, `marker_ids`):
they are health facts about the user (issue 29). From this revision the row holds them
only sealed with the user's key (`sealed_lab_test`). The migration does not fill it: the
service's start does, when it redacts the orders' events recorded before (`Order.Created`
v1, their test in clear) into their sealed version, with the same sealed value. A
migration has no master key to seal with, and its offline SQL reads nothing back (ADR
0017 decided the same). SQLite: secure_delete is on for this transaction, so the dropped
values are overwritten in the file (the start checkpoints the WAL). PostgreSQL: DROP
COLUMN leaves the bytes in the rows; the start's conversion rewrites the table (VACUUM
FULL). Self-contained: no import of the application's schema.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.create_table(
        "chain_redactions",
        sa.Column("position", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("original_topic", sa.Text(), nullable=False),
        sa.Column("original_digest", sa.LargeBinary(), nullable=False),
        sa.Column("redacted_topic", sa.Text(), nullable=False),
        sa.Column("redacted_digest", sa.LargeBinary(), nullable=False),
        sa.Column("redaction_position", sa.BigInteger(), nullable=False),
    )
    # The orders' Created events of version 1 (their test in clear), for the start to
    # redact: a statement, so that the offline SQL lists them too.
    op.create_table(
        "pending_redactions",
        sa.Column("position", sa.BigInteger(), primary_key=True, autoincrement=False),
    )
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        " WHERE topic = 'healthledger:Order.Created.v1' AND chain_position IS NOT NULL"
    )
    op.add_column("orders", sa.Column("sealed_lab_test", sa.Text()))
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+), as revision 0015 does.
    for column in ("lab_test_id", "lab_test_name", "marker_ids"):
        op.drop_column("orders", column)


def downgrade() -> None:
    # The redacted records keep their new payloads: their old ones are gone for good.
    # Without the index, `verify` of the older version names the first redacted record
    # as changed. The orders' tests come back as the erased placeholder (a rebuild of the
    # older version cannot open what it never sealed).
    op.add_column(
        "orders",
        sa.Column(
            "lab_test_id",
            sa.Uuid(),
            nullable=False,
            server_default="00000000-0000-0000-0000-000000000000",
        ),
    )
    op.add_column(
        "orders",
        sa.Column(
            "lab_test_name",
            sa.String(255),
            nullable=False,
            server_default="<personal data: erased>",
        ),
    )
    op.add_column("orders", sa.Column("marker_ids", sa.JSON(), nullable=False, server_default="[]"))
    op.drop_column("orders", "sealed_lab_test")
    op.drop_table("pending_redactions")
    op.drop_table("chain_redactions")
