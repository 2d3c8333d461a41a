"""The demo devices' injected failures sealed in the log (issue 29 §1, ADR 0032).

`Connection.DemoFailuresConfigured` v1 holds `failures` in clear: the resources a demo
device is to fail (`{"glucose": {"code": ..., "times": ...}}`), and a resource names
health data (a demo glucose monitor's "glucose"), on the user's connection's stream.
`DemoFailuresConfigured` v2 stores them sealed with the user's key (`SEALED_FACTS`). This
revision lists the v1 records in `pending_redactions` (revision 0016's table), which the
service's start redacts into the current version (ADR 0028's mechanism): sealed for a
live user, the placeholder (no failures) for one erased already; the start then rewrites
`stored_events`, so that no page keeps the old payloads. A migration has no master key to
seal with (ADR 0017): it only lists them, with a statement, so that the offline SQL lists
them too.

No read model holds the failures (the demo adapter reads them from the connection's
aggregate), so no column changes. Self-contained: no import of the application's schema.

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0049"
# To be rebased onto 0048 (written at the same time): revisions form one line.
down_revision = "0048"
branch_labels = None
depends_on = None

OLD_TOPICS = ("healthledger:Connection.DemoFailuresConfigured.v1",)
LISTED = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)


def upgrade() -> None:
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN ({LISTED}) AND chain_position IS NOT NULL"
    )


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics (as revision 0022's). Records not
    # redacted yet are listed no more.
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN ({LISTED}))"
    )
