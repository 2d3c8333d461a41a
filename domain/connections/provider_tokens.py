"""A maker's tokens for one OAuth connection, and the port that keeps them.

The access token, the refresh token and when the access token expires: what a code
exchange or a refresh answers (`ProviderTokens`). They are credentials to a person's
account at the maker, so they are kept only sealed with that person's data key, outside
the event log (a refresh replaces them, and a deregistration or an erasure must be able
to destroy them for good): see docs/adr/0022-provider-tokens-and-browser-binding.md.

The port (`ProviderTokenStore`) lets a connect store the tokens in the transaction that
records the connection, so that a connection made by OAuth never exists without them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

# An access token this close to its expiry is refreshed before use: a request that leaves
# with it must not arrive after it died.
EXPIRY_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True)
class ProviderTokens:
    """What the maker's token endpoint granted. The two tokens are secrets: kept out of
    reprs, so that no log line or traceback shows them."""

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    refresh_token: str | None = field(default=None, repr=False)
    # None when the maker did not say (the token lives until revoked).
    expires_at: datetime | None = None
    # The scopes granted, as the maker wrote them (None when it did not say).
    scope: str | None = None
    # The maker's id of the person, kept with the grant where ending the grant names it
    # (Polar's DELETE /v3/users/{user-id}): the revocation job has only the grant. None
    # for the other makers. Personal: sealed with the tokens, kept out of reprs.
    account: str | None = field(default=None, repr=False)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now + EXPIRY_MARGIN

    def sealable(self) -> dict[str, Any]:
        """The whole grant as one value to seal."""
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "refresh_token": self.refresh_token,
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "scope": self.scope,
            **({} if self.account is None else {"account": self.account}),
        }

    @classmethod
    def from_sealable(cls, value: dict[str, Any]) -> ProviderTokens:
        expires_at = value.get("expires_at")
        return cls(
            access_token=value["access_token"],
            token_type=value.get("token_type") or "Bearer",
            refresh_token=value.get("refresh_token"),
            expires_at=None if expires_at is None else datetime.fromisoformat(expires_at),
            scope=value.get("scope"),
            account=value.get("account"),
        )


@dataclass(frozen=True)
class GrantToKeep:
    """The tokens of a new connection period, and whose they are."""

    user_id: UUID
    team_id: UUID
    provider: str
    # The OAuth client that obtained them (a team's custom client or the service's): a
    # refresh must authenticate as the same client.
    client_id: str
    tokens: ProviderTokens


class ProviderTokenStore(Protocol):
    def kept_with(self, connection_id: UUID, grant: GrantToKeep) -> AbstractContextManager[None]:
        """Within it, the save that records the connection's `Created` or `Reconnected`
        event stores `grant` (sealed with the user's key) in the same transaction,
        replacing the previous period's. A save that fails stores nothing."""
        ...
