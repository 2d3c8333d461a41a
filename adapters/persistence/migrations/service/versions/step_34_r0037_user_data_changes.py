"""User data changes announced: on PostgreSQL, a trigger on each table a stored-days read
depends on (`health_data`, `users`, `user_data_keys`) sends the changed row's user id on
the `healthledger_user_data` channel, in the writing transaction, which PostgreSQL
delivers to the listening processes when, and only if, it commits (ADR 0043: each
process keeps the days it answered until then). A `TRUNCATE` sends an empty payload:
every user. Triggers, not the writers, so that no writer can forget to say so (a sync,
a compaction, the erasure's places, a migration). SQLite has no process to tell: its
reads are local, and nothing is kept.

Only a key's removal or a new key matters to a read (a master key rotation rewraps a key
in place: the data is the same), so `user_data_keys` announces inserts and deletions.

Self-contained: no import of the application's schema.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

CHANNEL = "healthledger_user_data"
# The tables, and the changes of each that a read can see.
TABLES = {
    "health_data": "INSERT OR UPDATE OR DELETE",
    "users": "INSERT OR UPDATE OR DELETE",
    "user_data_keys": "INSERT OR DELETE",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION healthledger_user_data_changed()
        RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('{CHANNEL}', OLD.user_id::text);
            ELSE
                PERFORM pg_notify('{CHANNEL}', NEW.user_id::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION healthledger_user_data_truncated()
        RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )
    for table, changes in TABLES.items():
        op.execute(
            f"CREATE TRIGGER healthledger_user_data_changed AFTER {changes} ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION healthledger_user_data_changed()"
        )
        op.execute(
            f"CREATE TRIGGER healthledger_user_data_truncated AFTER TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION healthledger_user_data_truncated()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS healthledger_user_data_changed ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS healthledger_user_data_truncated ON {table}")
    op.execute("DROP FUNCTION IF EXISTS healthledger_user_data_changed()")
    op.execute("DROP FUNCTION IF EXISTS healthledger_user_data_truncated()")
