"""The users read model keeps each user's environment.

A user belongs to the environment (sandbox or production) of the team API key that
created it, and its webhooks go to that environment's endpoints. Before this revision the
dispatcher found it by parsing the creating key's id out of the actor of the user's first
event; now `User.Created` records it (event version 2) and the read model keeps it. The
users stored before are filled in here once, from that first event's actor, as the
dispatcher used to. Self-contained: this revision reads the tables as they are at it, not
through the application's schema module, which moves on.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import json
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

DEFAULT_ENVIRONMENT = "sandbox"

users = sa.table("users", sa.column("user_id", sa.Uuid()), sa.column("environment", sa.String(16)))
stored_events = sa.table(
    "stored_events",
    sa.column("originator_id", sa.Uuid()),
    sa.column("originator_version", sa.Integer()),
    sa.column("state", sa.LargeBinary()),
)
team_api_keys = sa.table(
    "team_api_keys", sa.column("key_id", sa.Uuid()), sa.column("environment", sa.String(16))
)


def upgrade() -> None:
    op.add_column("users", sa.Column("environment", sa.String(16)))
    conn = op.get_bind()
    environments = {
        key_id: environment
        for key_id, environment in conn.execute(
            sa.select(team_api_keys.c.key_id, team_api_keys.c.environment)
        )
    }
    firsts = conn.execute(
        sa.select(users.c.user_id, stored_events.c.state).join(
            stored_events,
            sa.and_(
                stored_events.c.originator_id == users.c.user_id,
                stored_events.c.originator_version == 1,
            ),
        )
    ).all()
    found: dict[str, list[uuid.UUID]] = {}
    for user_id, state in firsts:
        # The state is the event's JSON (no cipher or compressor is configured); its
        # actor is "team_api_key:<id>" for a user created through the team API.
        actor = json.loads(bytes(state)).get("actor", "")
        kind, _, key_id = actor.partition(":")
        environment = DEFAULT_ENVIRONMENT
        if kind == "team_api_key":
            environment = environments.get(uuid.UUID(key_id), DEFAULT_ENVIRONMENT)
        found.setdefault(environment, []).append(user_id)
    for environment, user_ids in found.items():
        # In slices: a statement's bound parameters are limited on both databases.
        for start in range(0, len(user_ids), 1000):
            conn.execute(
                users.update()
                .where(users.c.user_id.in_(user_ids[start : start + 1000]))
                .values(environment=environment)
            )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("environment")
