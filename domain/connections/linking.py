"""Use cases of link tokens: issue one for a user (spec endpoint 6), and connect a provider
with one, consuming it in the same transaction as the connection: a demo device from the
link page, or an OAuth provider when the maker sends the person back to our callback.

The OAuth `state` names the link token and the provider, and carries a MAC keyed with the
token's stored hash: it is made here, from a genuine usable token, and nothing else can
make one (the token text, which would let its holder connect anyway, is never stored).
It is not personal: a token id and a provider slug. It needs no table and no secret of
its own, and dies with its token (expired, consumed, its user deleted).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.connections.connecting import Connections, PreparedConnection
from healthledger.domain.connections.connection import AlreadyConnected, Connection
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    REDIRECT,
    TOKEN_CONSUMED,
    LinkToken,
    LinkTokenRejected,
)
from healthledger.domain.connections.providers import (
    OAuthClient,
    OAuthNotSupported,
    ProviderAdapter,
)
from healthledger.domain.context import CommandContext, link_token_actor
from healthledger.domain.errors import (
    InvalidRequest,
    LedgerError,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.keys import link_token_id
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.teams.custom_credentials import SET, CustomCredentials
from healthledger.domain.users.lifecycle import UserLifecycle

# `hlo_<token id hex>_<MAC>`: shaped like the other key texts (keys.py), a different kind.
OAUTH_STATE = "hlo"
_OAUTH_STATE = re.compile(r"^hlo_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


class InvalidOAuthState(LedgerError):
    """A callback whose state we did not make (missing, altered, another provider's)."""

    def __init__(self) -> None:
        super().__init__(
            "This sign-in cannot be matched to a link. Start again from the link you were sent."
        )


def _state_mac(token: LinkToken, provider: str) -> str:
    # The provider is signed too: a state made for one provider is refused by another's
    # callback, so one maker's code cannot connect under another's name.
    message = f"healthledger oauth state v1\x1f{token.id.hex}\x1f{provider}".encode()
    digest = hmac.new(token.token_hash.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class IssuedLinkToken:
    token_id: UUID
    plain: str  # shown once; never stored


class LinkTokens:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        users: UserLifecycle,
        connections: Connections,
        provider_slugs: Collection[str],
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.users = users
        self.connections = connections
        self.provider_slugs = frozenset(provider_slugs)

    def issue(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        *,
        user_id: UUID,
        provider: str | None = None,
        redirect_url: str | None = None,
        filter_on_providers: Sequence[str] | None = None,
        on_error: str | None = None,
        on_close: str | None = None,
    ) -> IssuedLinkToken:
        """A token for a live user of the team, valid for LINK_TOKEN_LIFETIME.

        The HTTP adapter checks the request's shape (and documents it); the rules are
        checked here, so an embedding caller is held to them too: the body first (422),
        then the user (404), as every team API route does. An http(s) redirect_url is the
        caller's to ensure.
        """
        if provider is not None and provider not in self.provider_slugs:
            raise InvalidRequest("Unknown provider slug.", "provider")
        allowlist = None
        if filter_on_providers is not None:
            if not filter_on_providers:
                raise InvalidRequest(
                    "filter_on_providers must hold at least one provider slug, or be null.",
                    "filter_on_providers",
                )
            for index, slug in enumerate(filter_on_providers):
                if slug not in self.provider_slugs:
                    # The index, not the value: errors never echo what a caller sent.
                    raise InvalidRequest(
                        f"filter_on_providers[{index}] is not a known provider slug.",
                        "filter_on_providers",
                    )
            allowlist = list(dict.fromkeys(filter_on_providers))  # each slug once, in order
        for field, value in (("on_error", on_error), ("on_close", on_close)):
            if value is not None and value != REDIRECT:
                raise InvalidRequest(f"{field} must be '{REDIRECT}' or null.", field)
            # Redirecting needs somewhere to go: refused now rather than failing the user
            # on the link page later.
            if value == REDIRECT and redirect_url is None:
                raise InvalidRequest(f"{field} '{REDIRECT}' needs a redirect_url.", field)
        self.users.load_live(team_id, user_id)
        token, plain = LinkToken.issue(
            ctx,
            self.clock(),
            team_id=team_id,
            user_id=user_id,
            environment=environment,
            provider=provider,
            redirect_url=redirect_url,
            filter_on_providers=allowlist,
            on_error=on_error,
            on_close=on_close,
        )
        self.ledger.save(token)
        return IssuedLinkToken(token.id, plain)

    def genuine(self, plain: str) -> LinkToken:
        """The token whose text this is, in whatever state; else invalid_token."""
        token_id = link_token_id(plain)
        token = None if token_id is None else self.ledger.find(token_id)
        if not isinstance(token, LinkToken) or not token.matches(plain):
            raise LinkTokenRejected(INVALID_TOKEN)
        return token

    def connect_demo(
        self, plain: str, request_id: str, provider: str, resources: Sequence[str]
    ) -> LinkToken:
        """Connect a demo device of `provider` for the token's user and consume the token,
        in one transaction: a token is consumed exactly once, by a connection that exists.

        The actor of both events is the token (`link_token:<id>`): the person holding the
        link did this, not the team's key. Raises LinkTokenRejected (invalid, expired,
        consumed; a user deleted since the issue makes the token invalid) or
        AlreadyConnected; neither consumes the token.
        """
        token = self.genuine(plain)
        ctx = CommandContext(actor=link_token_actor(token.id), request_id=request_id)
        now = self.clock()
        token.require_usable(now)
        try:
            prepared = self.connections.prepare_demo(
                ctx, token.team_id, token.user_id, provider, resources
            )
        except (UserNotFound, UserScheduledForDeletion) as exc:
            raise LinkTokenRejected(INVALID_TOKEN) from exc
        token.consume(ctx, now, provider)
        try:
            self.ledger.save(*prepared.aggregates, token)
        except IntegrityError as exc:
            raise self._lost_to(token.id) from exc
        return token

    # -- OAuth providers ----------------------------------------------------------------

    def oauth_state(self, plain: str, provider: str) -> str:
        """The `state` to put in `provider`'s authorization URL for this link: a usable
        token that offers the provider. The callback finds the token again by it."""
        token = self.genuine(plain)
        token.require_usable(self.clock())
        offered = (
            [token.provider]
            if token.provider is not None
            else token.filter_on_providers or self.provider_slugs
        )
        if provider not in self.provider_slugs or provider not in offered:
            raise InvalidRequest("This provider is not offered by this link.", "provider")
        return f"{OAUTH_STATE}_{token.id.hex}_{_state_mac(token, provider)}"

    def token_of_state(self, state: str, provider: str) -> LinkToken:
        """The link token a callback's state names, whatever its state (the caller judges
        usability, so that a dead link can still lead back to the team's app)."""
        match = _OAUTH_STATE.match(state)
        token = None if match is None else self.ledger.find(UUID(match.group(1)))
        if not isinstance(token, LinkToken) or match is None:
            raise InvalidOAuthState()
        if not hmac.compare_digest(match.group(2), _state_mac(token, provider)):
            raise InvalidOAuthState()
        return token

    def connect_oauth(
        self,
        state: str,
        provider: str,
        code: str,
        redirect_uri: str,
        request_id: str,
        resources: Sequence[str],
    ) -> LinkToken:
        """The maker sent the person back with `code`: exchange it through the provider's
        adapter, then connect the provider for the token's user and consume the token in
        one transaction, as `connect_demo` does.

        The token and its user are checked before the code is spent. The team's custom
        credentials for the provider, when set, are the client the exchange authenticates
        as (their redirect_uri is this callback). Raises InvalidOAuthState,
        LinkTokenRejected, OAuthNotSupported, OAuthExchangeFailed or AlreadyConnected;
        none consumes the token.
        """
        token = self.token_of_state(state, provider)
        ctx = CommandContext(actor=link_token_actor(token.id), request_id=request_id)
        token.require_usable(self.clock())
        try:
            user = self.users.load_live(token.team_id, token.user_id)
        except (UserNotFound, UserScheduledForDeletion) as exc:
            raise LinkTokenRejected(INVALID_TOKEN) from exc
        adapter = self._oauth_adapter(provider)
        grant = adapter.exchange(code, redirect_uri, self._custom_client(token.team_id, provider))
        # The exchange took a round trip to the maker: the clock moves on.
        now = self.clock()
        sealed = self.connections.vault.seal(token.user_id, grant.external_user_id)
        availability = adapter.availability(resources)
        connection = self.ledger.find(Connection.id_for(token.user_id, provider))
        if connection is None:
            connection = Connection.connect_new(
                ctx,
                now,
                user_id=token.user_id,
                team_id=token.team_id,
                provider=provider,
                sealed_external_user_id=sealed,
                resource_availability=availability,
                demo=False,
            )
        else:
            assert isinstance(connection, Connection)
            connection.reconnect(
                ctx,
                now,
                sealed_external_user_id=sealed,
                resource_availability=availability,
                demo=False,
            )
        feeds = self.connections.pulls.schedule(ctx, connection, user, resources, now)
        prepared = PreparedConnection(connection, feeds)
        token.consume(ctx, now, provider)
        try:
            self.ledger.save(*prepared.aggregates, token)
        except IntegrityError as exc:
            raise self._lost_to(token.id) from exc
        return token

    def _oauth_adapter(self, provider: str) -> ProviderAdapter:
        # The composition root's one lookup of adapters, which pulls use too: a maker's
        # adapter registered there serves its callback and its connections' pulls alike.
        try:
            return self.connections.pulls.adapter_for(provider, False)
        except LookupError as exc:
            raise OAuthNotSupported(f"No OAuth adapter for {provider}.") from exc

    def _custom_client(self, team_id: UUID, provider: str) -> OAuthClient | None:
        creds = self.ledger.find(CustomCredentials.id_for(team_id, provider))
        if not isinstance(creds, CustomCredentials) or creds.status != SET:
            return None
        if creds.client_id is None or creds.sealed_client_secret is None:
            return None
        opened = self.connections.vault.open(team_id, creds.sealed_client_secret)
        # None once the team's data key is destroyed (a deleted team): no client left.
        if not isinstance(opened, dict) or not opened.get("client_secret"):
            return None
        return OAuthClient(creds.client_id, opened["client_secret"])

    def _lost_to(self, token_id: UUID) -> LedgerError:
        """What a connect lost to: another use of the token, or another connection of the
        same provider for the user (made through the team API meanwhile)."""
        token = self.ledger.find(token_id)
        if isinstance(token, LinkToken) and token.consumed_at is not None:
            return LinkTokenRejected(TOKEN_CONSUMED)
        return AlreadyConnected()
