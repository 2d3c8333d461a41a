"""How a client_user_id is kept out of the log in clear: sealed in the user's events (the
user's own data key), and named in its claim's events by a keyed digest.

Teams put e-mail addresses in client_user_id, whatever the spec asks. A user's events seal
the value with the user's key, so erasing the user (destroying that key) leaves nothing
readable. The claim that keeps the value unique in the team cannot be sealed with the
user's key (other users of the team must find it by the value), so its id and its events
use an HMAC-SHA256 of the value under a secret of the team: without that secret the log
does not link a claim to any value, and with it (a team holding a value) a digest can be
checked. See docs/adr/0017-client-user-id-digest.md.

The team's secret is 32 random bytes, sealed with the team's own data key in a team event
(`Team.ClientUserIdSecretCreated`): recorded with the team when the team is created, and
for a team created before digests existed, on first need. The teams context keeps it
(domain/teams/client_user_id_secrets.py); this context asks for it through the
`TeamSecrets` port, so users never load a team. Claims made before digests are
found by their old id (a uuid5 of the team and the clear value) as long as they exist, so
a team's old users keep their uniqueness guarantees; their Created records, which held the
value in clear, name it by the digest since the start redacted them (ADR 0054).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from healthledger.domain.context import CommandContext
from healthledger.domain.errors import TeamNotFound
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.user import ClientUserIdClaim, User

# The actor of a team secret made for a digest that no command asked for (an audit, a
# deletion report of a user created before digests).
DIGESTS = "system:client_user_id_digests"


def client_user_id_digest(team_secret: bytes, value: str) -> str:
    """The team's keyed digest of a client_user_id: HMAC-SHA256 over its UTF-8 bytes, hex."""
    return hmac.new(team_secret, value.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class TeamSecret:
    secret: bytes
    # Whether the team may hold claims made before digests (found by the clear value).
    legacy_claims: bool


class TeamSecrets(Protocol):
    """The port to a team's client_user_id secret (the teams context implements it)."""

    def secret_of(self, ctx: CommandContext, team_id: UUID) -> TeamSecret:
        """The team's secret, recorded now if the team has none yet; TeamNotFound for a
        deleted team (its key, and so its secret, is gone)."""
        ...


@dataclass(frozen=True)
class ClaimLocation:
    """Where the claim of one client_user_id of a team is, and its digest."""

    claim_id: UUID
    digest: str
    # The claim as read, or None when there is none or it was not read.
    claim: ClientUserIdClaim | None


class ClientUserIds:
    """Which claim holds a client_user_id of a team, and the team's digest of it."""

    def __init__(self, ledger: Ledger, secrets: TeamSecrets) -> None:
        self.ledger = ledger
        self.secrets = secrets

    # -- digests and claims ---------------------------------------------------------------

    def digest(self, ctx: CommandContext, team_id: UUID, value: str) -> str:
        """The team's digest of `value` (hex), as audits and deletion reports show it: a
        team holding the value can compute it and compare."""
        return client_user_id_digest(self.secrets.secret_of(ctx, team_id).secret, value)

    def digest_of_user(self, ctx: CommandContext, user: User) -> str:
        """The digest of the client_user_id a user holds (or last held), from its claim,
        erased users' too: a claim made before digests and not redacted yet holds the
        value in clear, and its digest is computed (TeamNotFound if the team was deleted:
        its secret is gone). One redacted in a deleted team holds neither (ADR 0054)."""
        claim = self.ledger.find(user.claim_id)
        assert isinstance(claim, ClientUserIdClaim), "every user holds or held its claim"
        if claim.digest is not None:
            return claim.digest
        if claim.client_user_id is None:
            raise TeamNotFound()
        return self.digest(ctx, claim.team_id, claim.client_user_id)

    def locate(
        self, ctx: CommandContext, team_id: UUID, value: str, *, read: bool = True
    ) -> ClaimLocation:
        """The claim of `value` in the team: its claim made before digests if that exists
        (it stays the value's claim for good), else the claim named by the digest, read
        only if `read` (a create's first attempt starts it without reading)."""
        team_secret = self.secrets.secret_of(ctx, team_id)
        digest = client_user_id_digest(team_secret.secret, value)
        if team_secret.legacy_claims:
            legacy_id = ClientUserIdClaim.id_for(team_id, value)
            # Nearly always absent: a read of the stream's first event says so at the cost
            # of one query (a load would look for a snapshot first).
            if any(True for _ in self.ledger.events.get(legacy_id, limit=1)):
                legacy = self.ledger.find(legacy_id)
                assert isinstance(legacy, ClientUserIdClaim)
                return ClaimLocation(legacy.id, digest, legacy)
        claim_id = ClientUserIdClaim.id_for_digest(digest)
        found = self.ledger.find(claim_id) if read else None
        assert found is None or isinstance(found, ClientUserIdClaim)
        return ClaimLocation(claim_id, digest, found)
