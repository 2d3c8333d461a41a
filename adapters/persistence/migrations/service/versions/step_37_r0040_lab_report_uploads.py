"""Lab reports uploaded to the parser (issue 34, `lab_report.parser_create_job`):
`lab_report_uploads`, a row per parsing job until it ends, the job's files sealed under
the user's key as bytes. A new table only. Self-contained: no import of the application's
schema.

Revision ID: 0040
Revises: 0039
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lab_report_uploads",
        sa.Column("job_id", sa.Uuid(), primary_key=True),
        sa.Column("team_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("uploaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("files", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_lab_report_uploads_user", "lab_report_uploads", ["user_id"])
    op.create_index("ix_lab_report_uploads_uploaded", "lab_report_uploads", ["uploaded_at"])


def downgrade() -> None:
    op.drop_index("ix_lab_report_uploads_uploaded", table_name="lab_report_uploads")
    op.drop_index("ix_lab_report_uploads_user", table_name="lab_report_uploads")
    op.drop_table("lab_report_uploads")
