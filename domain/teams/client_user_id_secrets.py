"""A team's client_user_id secret: the key of the team's digests of its users'
client_user_ids (domain/users/client_user_ids.py, ADR 0017), kept by the team.

The secret is 32 random bytes, sealed with the team's own data key in a team event
(`Team.ClientUserIdSecretCreated`): recorded with the team when the team is created, and
for a team created before digests existed, on first need. Deleting the team destroys its
key, and with it the secret.
"""

from __future__ import annotations

import base64
import os
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ConcurrentChange, TeamNotFound
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.teams import Team
from healthledger.domain.users.client_user_ids import TeamSecret

SECRET_BYTES = 32
# The field of the sealed JSON object that holds the secret (base64).
_SECRET_FIELD = "client_user_id_secret"
# Creating a team's secret loses to any concurrent change of the team (a rename too):
# it then reads the team again, and uses the secret another process recorded, if any.
_ATTEMPTS = 5


def sealed_new_secret(vault: PersonalDataVault, team_id: UUID) -> str:
    """A new random secret for the team, sealed with the team's own data key."""
    secret = base64.b64encode(os.urandom(SECRET_BYTES)).decode()
    return vault.seal(team_id, {_SECRET_FIELD: secret})


class ClientUserIdSecrets:
    """The teams' secrets (the users context's `TeamSecrets` port)."""

    def __init__(self, ledger: Ledger, vault: PersonalDataVault, clock: Clock) -> None:
        self.ledger = ledger
        self.vault = vault
        self.clock = clock
        # A team's secret never changes once recorded (the first recorded wins), so each
        # process keeps the ones it has opened.
        self.known: dict[UUID, TeamSecret] = {}

    def secret_of(self, ctx: CommandContext, team_id: UUID) -> TeamSecret:
        """The team's secret, recorded now (by a team event) if the team has none yet.

        Two processes may both find none and both record one: the event store lets one
        of them win (the team's next version), and the other reads the team again and
        uses the winner's secret."""
        known = self.known.get(team_id)
        if known is not None:
            return known
        for _attempt in range(_ATTEMPTS):
            team = self._live_team(team_id)
            if team.sealed_client_user_id_secret is None:
                try:
                    self.create_secret(ctx, team)
                except IntegrityError:
                    continue  # another process recorded one, or changed the team: read it
            return self._opened(team)
        raise ConcurrentChange()

    def recorded(self, team_id: UUID) -> TeamSecret | None:
        """The team's secret if it has one recorded, else None (never records one): what
        a read and a projection compute digests with (a team without a secret has no
        user whose value was digested; a deleted team's secret is gone)."""
        known = self.known.get(team_id)
        if known is not None:
            return known
        team = self.ledger.find(team_id)
        if not isinstance(team, Team) or team.deleted_at is not None:
            return None
        if team.sealed_client_user_id_secret is None:
            return None
        try:
            return self._opened(team)
        except TeamNotFound:
            return None

    def create_secret(self, ctx: CommandContext, team: Team) -> None:
        """Record a secret for a team that has none, created before digests: its claims
        made before may still be found by the clear value. Raises eventsourcing's
        IntegrityError if the team changed since it was read (another secret recorded)."""
        team.create_client_user_id_secret(
            ctx, self.clock(), sealed_new_secret(self.vault, team.id), legacy_claims=True
        )
        self.ledger.save(team)

    def _live_team(self, team_id: UUID) -> Team:
        team = self.ledger.find(team_id)
        # A deleted team's data key is destroyed: no secret can be opened or sealed for it.
        if not isinstance(team, Team) or team.deleted_at is not None:
            raise TeamNotFound()
        return team

    def _opened(self, team: Team) -> TeamSecret:
        sealed = team.sealed_client_user_id_secret
        assert sealed is not None
        opened = self.vault.open(team.id, sealed)
        if not isinstance(opened, dict):
            raise TeamNotFound()  # the team's key is gone: the team was deleted meanwhile
        secret = TeamSecret(
            base64.b64decode(opened[_SECRET_FIELD]), team.client_user_id_legacy_claims
        )
        self.known[team.id] = secret
        return secret
