"""Use cases of link tokens: issue one for a user (spec endpoint 6), and connect a provider
with one, consuming it in the same transaction as the connection: a demo device from the
link page, or an OAuth provider when the maker sends the person back to our callback.

An OAuth sign-in is a flow of its own (oauth_flows.py): started from the link page for a
usable token, bound to the browser that started it, claimed once by the callback, and
only then allowed to spend the maker's code. Its `state` names the flow and carries a
MAC keyed with the token's stored hash, so nothing else can make one and it dies with
its token (expired, consumed, its user deleted).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.connections.connecting import Connections, PreparedConnection
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    REDIRECT,
    TOKEN_CONSUMED,
    LinkToken,
    LinkTokenRejected,
)
from healthledger.domain.connections.oauth_clients import OAuthClients
from healthledger.domain.connections.oauth_flows import (
    InvalidOAuthState,
    OAuthFlow,
    OAuthFlowUsed,
    flow_id_of_state,
    new_binding,
    pkce_challenge,
    pkce_verifier,
)
from healthledger.domain.connections.provider_tokens import GrantToKeep, ProviderTokenStore
from healthledger.domain.connections.providers import OAuthNotSupported, ProviderAdapter
from healthledger.domain.context import CommandContext, link_token_actor
from healthledger.domain.errors import (
    InvalidRequest,
    LedgerError,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.keys import link_token_id
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.users.lifecycle import UserLifecycle
from healthledger.domain.users.user import User


@dataclass(frozen=True)
class IssuedLinkToken:
    token_id: UUID
    plain: str  # shown once; never stored


@dataclass(frozen=True)
class OAuthStart:
    """A flow just started: where to send the browser, and what its cookie must hold."""

    flow_id: UUID
    # The browser's binding secret: into its cookie, never stored or logged.
    binding: str
    authorization_url: str
    # The cookie need not outlive the flow, nor the link.
    expires_at: datetime


class LinkTokens:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        users: UserLifecycle,
        connections: Connections,
        provider_slugs: Collection[str],
        *,
        oauth_clients: OAuthClients,
        provider_tokens: ProviderTokenStore,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.users = users
        self.connections = connections
        self.provider_slugs = frozenset(provider_slugs)
        self.oauth_clients = oauth_clients
        self.provider_tokens = provider_tokens

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

    def usable_for(
        self, plain: str, provider: str, request_id: str
    ) -> tuple[LinkToken, CommandContext, User]:
        """The usable token whose text this is, when it offers `provider`, the context of
        what its holder does with it, and its live user. Raises LinkTokenRejected (a user
        deleted since the issue makes the token invalid) or InvalidRequest."""
        token = self.genuine(plain)
        ctx = CommandContext(actor=link_token_actor(token.id), request_id=request_id)
        token.require_usable(self.clock())
        offered = (
            [token.provider]
            if token.provider is not None
            else token.filter_on_providers or self.provider_slugs
        )
        if provider not in self.provider_slugs or provider not in offered:
            raise InvalidRequest("This provider is not offered by this link.", "provider")
        try:
            user = self.users.load_live(token.team_id, token.user_id)
        except (UserNotFound, UserScheduledForDeletion) as exc:
            raise LinkTokenRejected(INVALID_TOKEN) from exc
        return token, ctx, user

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

    def start_oauth(
        self, plain: str, provider: str, redirect_uri: str, request_id: str
    ) -> OAuthStart:
        """The person chose `provider` on the link page: a new flow for this usable
        token, and the maker's authorization URL to send the browser to, whose `state`
        names the flow and whose PKCE challenge comes from the browser's new binding
        secret (which goes into the browser's cookie, and nowhere else)."""
        token, ctx, _ = self.usable_for(plain, provider, request_id)
        now = self.clock()
        adapter = self._oauth_adapter(provider)
        binding = new_binding()
        flow = OAuthFlow.start(ctx, now, token, provider, binding)
        # Asked before the flow is saved: a maker this deployment cannot send anyone to
        # (no client to authenticate as) records nothing.
        url = adapter.authorization_url(
            redirect_uri,
            self.oauth_clients.custom(token.team_id, provider),
            flow.state(token),
            pkce_challenge(pkce_verifier(binding, flow.id)),
        )
        self.ledger.save(flow)
        return OAuthStart(flow.id, binding, url, min(flow.expires_at, token.expires_at))

    def find_oauth_flow(self, state: str, provider: str) -> tuple[LinkToken, OAuthFlow]:
        """The link token and the flow a callback's state names, whatever their states
        (the caller judges them, so that a dead link can still lead back to the team's
        app). Raises InvalidOAuthState for a state we did not make for `provider`."""
        flow_id = flow_id_of_state(state)
        flow = None if flow_id is None else self.ledger.find(flow_id)
        if not isinstance(flow, OAuthFlow):
            raise InvalidOAuthState()
        token = self.ledger.find(flow.link_token_id)
        if not isinstance(token, LinkToken) or not flow.has_state(state, token, provider):
            raise InvalidOAuthState()
        return token, flow

    def claim_oauth_flow(self, token: LinkToken, flow: OAuthFlow, request_id: str) -> None:
        """The maker sent the browser of `flow` back: claim the flow, once, before
        anything the maker sent is used. Raises LinkTokenRejected (the link is dead
        meanwhile: expired, consumed, its user deleted), OAuthFlowUsed or
        OAuthFlowExpired."""
        ctx = CommandContext(actor=link_token_actor(token.id), request_id=request_id)
        now = self.clock()
        token.require_usable(now)
        try:
            self.users.load_live(token.team_id, token.user_id)
        except (UserNotFound, UserScheduledForDeletion) as exc:
            raise LinkTokenRejected(INVALID_TOKEN) from exc
        flow.come_back(ctx, now)
        try:
            self.ledger.save(flow)
        except IntegrityError as exc:
            # Another callback with the same state claimed it first.
            raise OAuthFlowUsed() from exc

    def connect_oauth(
        self,
        token: LinkToken,
        flow: OAuthFlow,
        code: str,
        redirect_uri: str,
        binding: str,
        request_id: str,
        resources: Sequence[str],
    ) -> LinkToken:
        """The maker sent the person back with `code` on a claimed flow: exchange it
        through the provider's adapter (with the flow's PKCE verifier), then connect the
        provider for the token's user, store the maker's tokens sealed with the user's
        key and consume the link token, in one transaction, as `connect_demo` does.

        The token and its user are checked again before the code is spent (the claim
        was its own transaction). The team's custom credentials for the provider, when
        set, are the client the exchange authenticates as. Raises LinkTokenRejected,
        OAuthNotSupported, OAuthExchangeFailed or AlreadyConnected; none consumes the
        token.
        """
        provider = flow.provider
        ctx = CommandContext(actor=link_token_actor(token.id), request_id=request_id)
        token.require_usable(self.clock())
        try:
            user = self.users.load_live(token.team_id, token.user_id)
        except (UserNotFound, UserScheduledForDeletion) as exc:
            raise LinkTokenRejected(INVALID_TOKEN) from exc
        adapter = self._oauth_adapter(provider)
        grant = adapter.exchange(
            code,
            redirect_uri,
            self.oauth_clients.custom(token.team_id, provider),
            pkce_verifier(binding, flow.id),
        )
        # The exchange took a round trip to the maker: the clock moves on.
        return self.connect_granted(
            ctx,
            token,
            user,
            provider,
            grant.external_user_id,
            adapter.availability(resources, grant),
            resources,
            None
            if grant.tokens is None or grant.client_id is None
            else GrantToKeep(token.user_id, token.team_id, provider, grant.client_id, grant.tokens),
        )

    def connect_granted(
        self,
        ctx: CommandContext,
        token: LinkToken,
        user: User,
        provider: str,
        external_user_id: str | None,
        availability: dict[str, Any],
        resources: Sequence[str],
        grant: GrantToKeep | None,
    ) -> LinkToken:
        """Connect `provider` for the token's user with what its maker granted (the
        person's account there, sealed, and the grant to keep, sealed by the token
        store), schedule its pulls and consume the token, in one transaction: the end of
        every sign-in at a maker (OAuth, password, e-mail code). Raises LinkTokenRejected
        (used meanwhile) or AlreadyConnected."""
        now = self.clock()
        sealed = (
            None
            if external_user_id is None
            else self.connections.vault.seal(token.user_id, external_user_id)
        )
        connection = self.connections.connected(
            ctx,
            now,
            token.team_id,
            token.user_id,
            provider,
            sealed,
            availability,
            demo=False,
        )
        feeds = self.connections.pulls.schedule(ctx, connection, user, resources, now)
        prepared = PreparedConnection(connection, feeds)
        token.consume(ctx, now, provider)
        kept: AbstractContextManager[None] = nullcontext()
        if grant is not None:
            kept = self.provider_tokens.kept_with(connection.id, grant)
        try:
            with kept:
                self.ledger.save(*prepared.aggregates, token)
        except IntegrityError as exc:
            raise self._lost_to(token.id) from exc
        return token

    def _oauth_adapter(self, provider: str) -> ProviderAdapter:
        # The composition root's one lookup of adapters, which pulls use too: a maker's
        # adapter registered there serves its link flow and its connections' pulls alike.
        try:
            return self.connections.pulls.adapter_for(provider, False)
        except LookupError as exc:
            raise OAuthNotSupported(f"No OAuth adapter for {provider}.") from exc

    def _lost_to(self, token_id: UUID) -> LedgerError:
        """What a connect lost to: another use of the token, or another connection of the
        same provider for the user (made through the team API meanwhile)."""
        token = self.ledger.find(token_id)
        if isinstance(token, LinkToken) and token.consumed_at is not None:
            return LinkTokenRejected(TOKEN_CONSUMED)
        return AlreadyConnected()
