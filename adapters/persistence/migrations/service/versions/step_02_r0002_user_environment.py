"""The users read model keeps each user's environment.

A user belongs to the environment (sandbox or production) of the team API key that
created it, and its webhooks go to that environment's endpoints. Before this revision the
dispatcher found it by parsing the creating key's id out of the actor of the user's first
event; now `User.Created` records it (event version 2) and the read model keeps it. The
users stored before are filled in here once, from that first event's actor, as the
dispatcher used to. Self-contained: plain SQL on the tables as they are at this
revision, not the application's schema module, which moves on.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# One UPDATE, so that it runs the same online and in offline mode (the SQL script a DBA
# applies by hand, which can read nothing back). A user's first event is its Created
# event; its stored state is JSON text (no cipher or compressor is configured), whose
# actor is "team_api_key:<the key's id>" for a user created through the team API.
# Anything else, or a key no longer there: sandbox, the default.
BACKFILL = {
    # key_id is a UUID column; the actor's id is in its canonical (dashed) text.
    "postgresql": """
        UPDATE users SET environment = COALESCE((
            SELECT k.environment
            FROM stored_events e
            JOIN team_api_keys k
              ON convert_from(e.state, 'UTF8')::jsonb ->> 'actor'
                 = 'team_api_key:' || k.key_id::text
            WHERE e.originator_id = users.user_id AND e.originator_version = 1
        ), 'sandbox')
    """,
    # key_id is 32 hex digits (CHAR(32)); the actor's id has dashes after 13 characters
    # of prefix.
    "sqlite": """
        UPDATE users SET environment = COALESCE((
            SELECT k.environment
            FROM stored_events e
            JOIN team_api_keys k
              ON json_extract(CAST(e.state AS TEXT), '$.actor') LIKE 'team_api_key:%'
             AND replace(substr(json_extract(CAST(e.state AS TEXT), '$.actor'), 14), '-', '')
                 = k.key_id
            WHERE e.originator_id = users.user_id AND e.originator_version = 1
        ), 'sandbox')
    """,
}


def upgrade() -> None:
    op.add_column("users", sa.Column("environment", sa.String(16)))
    op.execute(BACKFILL[op.get_context().dialect.name])


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("environment")
