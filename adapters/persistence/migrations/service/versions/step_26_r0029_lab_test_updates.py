"""Lab tests renamed and taken out of use (issue 33's `update_lab_test`): the `lab_tests`
read model's `active` (whether the test takes new orders) and `updated_at` (when its name
or state last changed), both from `LabTest.Updated`.

No lab test was changed before this revision (it had no such event): every existing row
is active and was last updated when it was created. Self-contained: no import of the
application's schema.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The server default fills the existing rows (and stays: a row is always written with
    # the value by the projection).
    with op.batch_alter_table("lab_tests") as batch:
        batch.add_column(
            sa.Column("active", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE lab_tests SET updated_at = created_at")
    with op.batch_alter_table("lab_tests") as batch:
        batch.alter_column("updated_at", existing_type=sa.DateTime(timezone=True), nullable=False)


def downgrade() -> None:
    # The older version knows no renaming: a renamed test keeps its last name, and an
    # inactive one shows as active again (its Updated events stay in the log).
    with op.batch_alter_table("lab_tests") as batch:
        batch.drop_column("updated_at")
        batch.drop_column("active")
