"""Stream owners: which streams belong to which user, for the user's audit.

A user's audit takes in its claim, connections, pulls (resource feeds), link tokens and
the webhook deliveries about it. Their ids were derived in Python from the user's (or not
derivable at all); now the `stream_owners` read model lists them, one row per (user,
stream), written by the projection in `projections/stream_owners.py`. The streams stored
before are filled in here from the log, as that projection reads the same events: each
owned stream's founding event names its user (`user_id`; a user's own stream is the
user) and its team (`team_id`), and a claim's `Claimed` event hands it to a further user,
in the team of the claim's founding event. Self-contained: the topics are written out
here, and the SQL reads the tables as they are at this revision.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The founding event of each owned stream, by its pinned topic, and the kind it is listed
# as (the projection's OWNED_STREAMS).
FOUNDING = {
    "healthledger:User.Created.v1": "user",
    "healthledger:ClientUserIdClaim.Created.v1": "claim",
    "healthledger:Connection.Created.v1": "connection",
    "healthledger:ResourceFeed.Created.v1": "pull",
    "healthledger:LinkToken.Issued.v1": "link_token",
    "healthledger:WebhookDelivery.Created.v1": "webhook_delivery",
}
USER_CREATED = "healthledger:User.Created.v1"
CLAIMED = "healthledger:ClientUserIdClaim.Claimed.v1"

# A UUID field of an event's stored state, as the column type stores it. The state is
# JSON text (no cipher or compressor is configured); eventsourcing's transcoder writes a
# UUID as {"_type_": "uuid_hex", "_data_": "<32 hex digits>"}.
UUID_FIELD = {
    # 32 hex digits cast to uuid.
    "postgresql": "(convert_from({e}.state, 'UTF8')::jsonb -> '{name}' ->> '_data_')::uuid",
    # The Uuid column is CHAR(32) of lower-case hex digits on SQLite: the same text.
    "sqlite": "json_extract(CAST({e}.state AS TEXT), '$.{name}._data_')",
}


def _field(dialect: str, alias: str, name: str) -> str:
    return UUID_FIELD[dialect].format(e=alias, name=name)


def _quoted(values: list[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def backfill(dialect: str) -> list[str]:
    """The two INSERTs: each founded stream's owner, then each further holder of a claim
    (at its first Claimed event; not its founder again, who took it back by an undo)."""
    kinds = " ".join(f"WHEN '{topic}' THEN '{kind}'" for topic, kind in FOUNDING.items())
    founded = f"""
        INSERT INTO stream_owners (user_id, originator_id, team_id, kind, first_seen_at)
        SELECT CASE WHEN e.topic = '{USER_CREATED}' THEN e.originator_id
                    ELSE {_field(dialect, "e", "user_id")} END,
               e.originator_id,
               {_field(dialect, "e", "team_id")},
               CASE e.topic {kinds} END,
               e.timestamp
        FROM stored_events e
        WHERE e.topic IN ({_quoted(list(FOUNDING))})
    """
    holder = _field(dialect, "c", "user_id")
    team = _field(dialect, "f", "team_id")
    taken = f"""
        INSERT INTO stream_owners (user_id, originator_id, team_id, kind, first_seen_at)
        SELECT {holder}, c.originator_id, {team}, 'claim', MIN(c.timestamp)
        FROM stored_events c
        JOIN stored_events f
          ON f.originator_id = c.originator_id AND f.originator_version = 1
        WHERE c.topic = '{CLAIMED}'
          AND NOT EXISTS (
            SELECT 1 FROM stream_owners s
            WHERE s.user_id = {holder} AND s.originator_id = c.originator_id
          )
        GROUP BY {holder}, c.originator_id, {team}
    """
    return [founded, taken]


def upgrade() -> None:
    op.create_table(
        "stream_owners",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("originator_id", sa.Uuid(), nullable=False),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "originator_id"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_stream_owners_originator", "stream_owners", ["originator_id"])
    # Plain statements, so that they run the same in offline mode (the SQL script a DBA
    # applies by hand, which can read nothing back).
    for statement in backfill(op.get_context().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    op.drop_index("ix_stream_owners_originator", table_name="stream_owners")
    op.drop_table("stream_owners")
