"""The makers and OAuth clients of connections' tokens held only sealed with the user's
key (issue 29 §1, ADR 0022, ADR 0047).

`provider_tokens` held each OAuth or credential connection's maker (`provider`) in clear
beside its user, and the OAuth client that obtained the tokens (`client_id`), which the
team's OAuth client settings map to its maker in clear: a maker is a health fact
(`freestyle_libre`, a glucose monitor, says the person is diabetic). From this revision a
row seals both with its tokens under the user's key, in one value (`sealed_grant`, the
column `sealed_tokens` renamed). No read selects or groups by them (a row is found by its
connection, or by its due revocation time), so no keyed digest is kept.

A migration has no master key to seal with (ADR 0017): this revision moves each row's
maker and client to `provider_token_backfill` and drops the columns; the service's start
seals them into their rows (deleting a row whose user's key is gone) and empties the
table, before anything reads the tokens, then rewrites both tables. SQLite: secure_delete
is on for this transaction, so the dropped values are overwritten in the file (the
start checkpoints the WAL); PostgreSQL: DROP COLUMN leaves the bytes in the rows, the
start's VACUUM FULL rewrites the tables. Self-contained: no import of the application's
schema.

Revision ID: 0047
Revises: 0046
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.create_table(
        "provider_token_backfill",
        sa.Column("connection_id", sa.Uuid(), primary_key=True),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("client_id", sa.String(512), nullable=False),
    )
    op.execute(
        "INSERT INTO provider_token_backfill (connection_id, provider, client_id)"
        " SELECT connection_id, provider, client_id FROM provider_tokens"
    )
    # ALTER TABLE ... DROP / RENAME COLUMN on SQLite too (3.35+), as revision 0044 does.
    op.drop_column("provider_tokens", "provider")
    op.drop_column("provider_tokens", "client_id")
    op.execute("ALTER TABLE provider_tokens RENAME COLUMN sealed_tokens TO sealed_grant")


def downgrade() -> None:
    # The rows the start has not sealed yet get their maker and client back; a sealed row
    # cannot be told without the key (a migration has none): it is deleted, as if its
    # connection's tokens were gone (the older version then asks for a new connect, and
    # skips its revocation). Its sealed value would not open in the older version anyway.
    op.execute("ALTER TABLE provider_tokens RENAME COLUMN sealed_grant TO sealed_tokens")
    op.execute(
        "DELETE FROM provider_tokens WHERE connection_id NOT IN"
        " (SELECT connection_id FROM provider_token_backfill)"
    )
    op.add_column(
        "provider_tokens",
        sa.Column("provider", sa.String(64), nullable=False, server_default=""),
    )
    op.add_column(
        "provider_tokens",
        sa.Column("client_id", sa.String(512), nullable=False, server_default=""),
    )
    op.execute(
        "UPDATE provider_tokens SET"
        " provider = (SELECT b.provider FROM provider_token_backfill b"
        " WHERE b.connection_id = provider_tokens.connection_id),"
        " client_id = (SELECT b.client_id FROM provider_token_backfill b"
        " WHERE b.connection_id = provider_tokens.connection_id)"
    )
    op.drop_table("provider_token_backfill")
