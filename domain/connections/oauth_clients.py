"""Which OAuth client a team's connections to a maker authenticate as.

A team that set custom credentials for a provider (management API) signs its users in
with its own client; otherwise the service's own client for that maker is used, which
the provider adapter holds (`None` here means "the service's"). The authorization, the
code exchange and every later refresh of the grant must use the same client.
"""

from __future__ import annotations

from uuid import UUID

from healthledger.domain.connections.providers import OAuthClient
from healthledger.domain.ledger import Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.custom_credentials import SET, CustomCredentials


class OAuthClients:
    def __init__(self, ledger: Ledger, vault: PersonalDataVault) -> None:
        self.ledger = ledger
        self.vault = vault

    def custom(self, team_id: UUID, provider: str) -> OAuthClient | None:
        """The team's own client for the provider, its secret unsealed for the call; None
        when the team set none (or deleted them, or the team is deleted)."""
        creds = self.ledger.find(CustomCredentials.id_for(team_id, provider))
        if not isinstance(creds, CustomCredentials) or creds.status != SET:
            return None
        if creds.client_id is None or creds.sealed_client_secret is None:
            return None
        opened = self.vault.open(team_id, creds.sealed_client_secret)
        # None once the team's data key is destroyed (a deleted team): no client left.
        if not isinstance(opened, dict) or not opened.get("client_secret"):
            return None
        return OAuthClient(creds.client_id, opened["client_secret"])
