"""The client_user_id's old records redacted: none holds the value in clear (issue 29,
ADR 0054).

A client_user_id is a team's identifier of the person, often an e-mail address. Since ADR
0017 the events hold it sealed with the user's key (the user's) or as the team's keyed
digest (the claim's), but the records stored before kept it in clear, for good:
`User.ClientUserIdChanged` v1 (`old_client_user_id`, `new_client_user_id`) and
`ClientUserIdClaim.Created` v1 (`client_user_id`). Revision 0042's redaction sealed the
value of the old `User.Created`; these are the two kinds left.

A migration has no master key to seal with nor the teams' secrets to digest with (ADR
0017): this revision lists every record of the two topics in `pending_redactions` (which
of them are of version 1 is in their JSON, read by the start), and the service's start
redacts them in place (ADR 0028, `old_versions.SEALED_IN_PLACE`: the same topic, the
current class version): a change's new value sealed with the user's key (or removed for a
user erased already), the claim of its time named (`new_claim_id`), its old value gone;
a claim's value named by the team's keyed digest (none in a deleted team, whose secret
is gone). A claim's stream id, derived from the team and the clear value, stays: it is the
record's key, and the claim is still found by it.

The users' snapshots hold the aggregate's state, a value changed by a v1 change in clear
with it: the snapshots of every user with a change of client_user_id are deleted, and any
claim's (the service snapshots none: deleted all the same), a cache either way. The
`users` rows hold the value only sealed and as a digest since revision 0015. SQLite:
secure_delete is on for this transaction, so the deleted snapshots are overwritten in the
file (the start checkpoints the WAL); PostgreSQL: the start's VACUUM FULL of `snapshots`
and `stored_events` rewrites them after redacting. Self-contained: no import of the
application's schema.

Revision ID: 0046
Revises: 0045
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None

CHANGED = "healthledger:User.ClientUserIdChanged.v1"
CLAIMED = "healthledger:ClientUserIdClaim.Created.v1"
_IN = f"('{CHANGED}', '{CLAIMED}')"


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("PRAGMA secure_delete=ON")
    op.execute(
        "INSERT INTO pending_redactions (position) SELECT chain_position FROM stored_events"
        f" WHERE topic IN {_IN} AND chain_position IS NOT NULL"
    )
    op.execute(
        "DELETE FROM snapshots WHERE originator_id IN (SELECT originator_id FROM"
        f" stored_events WHERE topic IN {_IN})"
    )


def downgrade() -> None:
    # The redacted records keep their current version (their old payloads are gone for
    # good), which the version before reads as it does a change or a claim made since.
    op.execute(
        "DELETE FROM pending_redactions WHERE position IN (SELECT chain_position FROM"
        f" stored_events WHERE topic IN {_IN})"
    )
