"""The hash chain over the event log, and its signed heads.

Every event row gets its place in one chain over the whole log (`chain_position`: 1, 2,
3... in notification order, unique) and its link hash (`chain_hash`), which the recorder
writes from now on with each row (docs/adr/0015-hash-chained-log.md). `chain_heads`
holds the heads the service signs. The events stored before are chained here, in
notification order, a batch at a time: the same positions and hashes as if they had been
written with the chain. The hash is `link_hash` of the chain module, hl-chain-v1, whose
definition is fixed by its name (a different link would be another version): so this
revision computes exactly what the recorder does, and a test holds the two equal.

Offline (the SQL script a DBA applies) nothing can be read back to hash: on PostgreSQL the
script refuses to run on a log that holds events (migrate online, `healthledger
migrate`), and on an empty one it is complete.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from datetime import UTC

import sqlalchemy as sa
from alembic import op
from healthledger.adapters.persistence.eventstore.chain import GENESIS, link_hash, state_digest

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Rows hashed and updated per round trip.
BATCH = 2000

# The table as it is at this revision (not the application's schema module).
events = sa.table(
    "stored_events",
    sa.column("notification_id", sa.BigInteger),
    sa.column("originator_id", sa.Uuid),
    sa.column("originator_version", sa.Integer),
    sa.column("topic", sa.Text),
    sa.column("state", sa.LargeBinary),
    sa.column("timestamp", sa.DateTime(timezone=True)),
    sa.column("chain_position", sa.BigInteger),
    sa.column("chain_hash", sa.LargeBinary),
)

OFFLINE_GUARD = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM stored_events) THEN
        RAISE EXCEPTION 'stored_events holds events, which revision 0003 chains by hashing '
            'them: apply it online (healthledger migrate), not from the SQL script';
    END IF;
END $$
"""


def upgrade() -> None:
    op.add_column("stored_events", sa.Column("chain_position", sa.BigInteger()))
    op.add_column("stored_events", sa.Column("chain_hash", sa.LargeBinary()))
    op.create_index(
        "ix_stored_events_chain_position", "stored_events", ["chain_position"], unique=True
    )
    op.create_table(
        "chain_heads",
        sa.Column("position", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("chain_hash", sa.LargeBinary(), nullable=False),
        sa.Column("signed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("signature", sa.LargeBinary(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("public_key", sa.LargeBinary(), nullable=False),
    )
    if op.get_context().as_sql:
        if op.get_context().dialect.name == "postgresql":
            op.execute(OFFLINE_GUARD)
        return
    backfill(op.get_bind())


def backfill(conn: sa.Connection) -> None:
    """Chain every stored event, in notification order, BATCH rows at a time."""
    update = (
        sa.update(events)
        .where(events.c.notification_id == sa.bindparam("row_id"))
        .values(chain_position=sa.bindparam("position"), chain_hash=sa.bindparam("hash"))
    )
    position, prev, after = 0, GENESIS, 0
    while True:
        rows = conn.execute(
            sa.select(
                events.c.notification_id,
                events.c.originator_id,
                events.c.originator_version,
                events.c.topic,
                events.c.state,
                events.c.timestamp,
            )
            .where(events.c.notification_id > after)
            .order_by(events.c.notification_id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        changes = []
        for row_id, originator_id, version, topic, state, timestamp in rows:
            position += 1
            # SQLite keeps the UTC instant without its offset.
            moment = timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)
            prev = link_hash(
                prev, position, originator_id, version, topic, moment, state_digest(bytes(state))
            )
            changes.append({"row_id": row_id, "position": position, "hash": prev})
        conn.execute(update, changes)
        after = rows[-1][0]


def downgrade() -> None:
    op.drop_table("chain_heads")
    op.drop_index("ix_stored_events_chain_position", table_name="stored_events")
    # ALTER TABLE ... DROP COLUMN on SQLite too (3.35+): a batch copy of the table would
    # lose its AUTOINCREMENT.
    op.drop_column("stored_events", "chain_hash")
    op.drop_column("stored_events", "chain_position")
