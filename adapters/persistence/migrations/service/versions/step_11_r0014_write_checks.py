"""Write checks: a function that fails a statement, so that a check of a write
transaction on PostgreSQL goes with its statements and needs no answer before the COMMIT
(ADR 0025).

`healthledger_check(ok, failure)` is true when `ok` is; otherwise it raises SQLSTATE
HL001 with `failure` as the message, which aborts the transaction: PostgreSQL skips the
rest of the pipeline, the COMMIT too. The recorder checks with it that the chain's head
is the one it linked new rows onto, and that they were numbered in chain order; the key
store, that a new user's key was stored (the master key not rotated meanwhile). SQLite
has no such function, and needs none: its one writer reads its answers at once.
Self-contained: no import of the application's schema.

Revision ID: 0014
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE OR REPLACE FUNCTION healthledger_check(ok boolean, failure text)
        RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN
            IF ok IS NOT TRUE THEN
                RAISE EXCEPTION USING ERRCODE = 'HL001', MESSAGE = failure;
            END IF;
            RETURN true;
        END
        $$
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS healthledger_check(boolean, text)")
