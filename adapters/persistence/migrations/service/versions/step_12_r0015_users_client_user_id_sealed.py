"""The users read model holds the client_user_id only sealed and as the team's digest.

Until now each users row held the client_user_id in clear (`client_user_id`, indexed by
`ix_users_team_client_user_id`), for lookups and answers. On PostgreSQL an erased user's
value then lived on in the table's file, its index and the WAL after the row was deleted,
beyond the reach of the master key's rotation (issue 29). From this revision the row holds
`sealed_client_user_id` (sealed with the user's data key: opened to answer, and gone with
the key) and `client_user_id_digest` (HMAC-SHA256 under the team's secret, the digest the
claims are named by: what resolve and undo find a user by, indexed with the team).

Decided: the migration does not fill the new columns; the service does, at start, from
the log (`projections/users.py` `seal_client_user_ids`, called by `build_service`). A
migration gets a database URL and nothing else: it runs before the master key is read
(`migrating.at_start`), from `healthledger migrate`, and as offline SQL that a DBA
applies by hand, which can read nothing back. Sealing needs the user's data key and the
digest needs the team's secret, itself sealed with the team's key: neither opens without
the master key. So this revision adds the two columns (NULL in the rows written before),
drops the clear column and its index, and the first start after it gives each row with a
NULL sealed value its sealed value and digest from the user's events: as the event holds
it sealed, or sealed now with the user's key if recorded in clear before ADR 0017 (a user
without a key gets one); the team's secret is recorded if the team has none yet. Until
that start has run, such a user answers its client_user_id as erased and is not found by
resolve; `build_service` runs it before anything reads.

SQLite: secure_delete is on for this transaction, so the dropped values are overwritten
in the database file (`ALTER TABLE ... DROP COLUMN`, SQLite 3.35+, rewrites each row; a
batch copy would also lose the table's WITHOUT ROWID). The start's conversion then
checkpoints the WAL. PostgreSQL: DROP COLUMN leaves the bytes in the rows until they are
rewritten; the conversion updates every row and then runs `VACUUM FULL users`, which
writes the table into a new file. The WAL, replicas and backups of before keep the old
values: that is said in docs/compliance.md.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    if sqlite:
        op.execute("PRAGMA secure_delete=ON")
    op.add_column("users", sa.Column("sealed_client_user_id", sa.Text()))
    op.add_column("users", sa.Column("client_user_id_digest", sa.String(64)))
    op.drop_index("ix_users_team_client_user_id", table_name="users")
    op.create_index(
        "ix_users_team_client_user_id_digest", "users", ["team_id", "client_user_id_digest"]
    )
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+): a batch copy of the table would
    # lose its WITHOUT ROWID.
    op.drop_column("users", "client_user_id")


def downgrade() -> None:
    # The clear values cannot come back without the keys: the column returns with the
    # erased placeholder, and `healthledger rebuild` of the older version (which opens
    # the sealed values of the events) fills it.
    op.add_column(
        "users",
        sa.Column(
            "client_user_id",
            sa.String(255),
            nullable=False,
            server_default="<personal data: erased>",
        ),
    )
    op.drop_index("ix_users_team_client_user_id_digest", table_name="users")
    op.create_index("ix_users_team_client_user_id", "users", ["team_id", "client_user_id"])
    op.drop_column("users", "client_user_id_digest")
    op.drop_column("users", "sealed_client_user_id")
