"""The makers of OAuth flows and credential sign-ins sealed in the log (issue 29 §1, ADR
0032).

An OAuth flow names the maker the link page sent the browser to (`provider` of
`OAuthFlow.Started` v1), a credential sign-in the password maker that asked for a code
(`provider` of `CredentialSignIn.Challenged` v1): health facts (`freestyle_libre`, a
glucose monitor, says the person is diabetic), held in clear. `Started` v2 and
`Challenged` v2 store them sealed with the user's key (`SEALED_FACTS`). This revision
lists the v1 records in `pending_redactions` (revision 0016's table), which the service's
start redacts into the current versions (ADR 0028's mechanism): sealed for a live user,
the placeholder for one erased already; the start then rewrites `stored_events`, so that
no page keeps the old payloads. A migration has no master key to seal with (ADR 0017): it
only lists them, with a statement, so that the offline SQL lists them too.

No read model holds either aggregate, so no column changes. New sign-ins' stream ids are
keyed by the user's key (ADR 0045, no schema change); old ones keep their uuid5 ids
(legacy stream ids). Self-contained: no import of the application's schema.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None

OLD_TOPICS = (
    "healthledger:OAuthFlow.Started.v1",
    "healthledger:CredentialSignIn.Challenged.v1",
)
LISTED = ", ".join(f"'{topic}'" for topic in OLD_TOPICS)


def upgrade() -> None:
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN ({LISTED}) AND chain_position IS NOT NULL"
    )


def downgrade() -> None:
    # The redacted records keep their sealed payloads (their old ones are gone for good);
    # the older version reads none of their topics (a flow and a sign-in live minutes).
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN ({LISTED}))"
    )
