"""The day from which users created before ADR 0057 take keyed summary ids (issue 29 §1).

A user created before ADR 0057 has a data key of format 1, and with it the uuid5 summary
ids it has been answered (`domain/connections/summary_ids.py`): those must not change.
The days no one can have been answered yet can take keyed ids instead: the days from a
week after this revision ran. A day's data is stored at the earliest about fourteen
hours before the day begins in UTC (a zone of +14:00), so none of those days was stored,
or answered, by the code of before. Each day then keeps its kind of id for good.

One row, written once: the revision's own date plus seven days, in the database's SQL
(so that the offline SQL writes it too, when it is applied).

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None

TODAY_AND_A_WEEK = {
    "sqlite": "date('now', '+7 days')",
    "postgresql": "(now() AT TIME ZONE 'UTC')::date + 7",
}


def upgrade() -> None:
    op.create_table(
        "keyed_ids_cut_over",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("keyed_from", sa.Date(), nullable=False),
    )
    today = TODAY_AND_A_WEEK[op.get_context().dialect.name]
    op.execute(f"INSERT INTO keyed_ids_cut_over (id, keyed_from) VALUES (1, {today})")


def downgrade() -> None:
    op.drop_table("keyed_ids_cut_over")
