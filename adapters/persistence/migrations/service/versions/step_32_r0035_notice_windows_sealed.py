"""The makers' notices' windows sealed in the log (issue 29 §1, ADR 0032).

`NoticeReceipt.Received` v2 seals the maker and the resources a notice named but holds
its window in clear (`start`, `end`: on which days the person had data at the maker).
Its v3 seals the window with them, with the user's key (the log's mapper, ADR 0032).
This revision lists the v2 records in `pending_redactions` (revision 0016's table), which
the service's start redacts into v3 (ADR 0028's mechanism): sealed for a live user, the
placeholder for one erased already. The v1 records still listed by revision 0023 are
redacted straight into v3. A record is redacted once (`chain_redactions` is keyed by
position): a v2 record that is itself the redaction of a v1 one is not listed, and keeps
its window in clear (ADR 0032, "Not done yet"). The queue's rows (`maker_notices`) hold
no window: no column changes. A migration has no master key to seal with (ADR 0017): it
only lists them, with a statement, so that the offline SQL lists them too.

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

OLD_TOPIC = "healthledger:NoticeReceipt.Received.v2"


def upgrade() -> None:
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic = '{OLD_TOPIC}' AND chain_position IS NOT NULL"
        " AND chain_position NOT IN (SELECT position FROM chain_redactions)"
    )


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads no v3 record. Records not redacted yet stay listed no more.
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic = '{OLD_TOPIC}')"
    )
