"""Use cases of link tokens: issue one for a user (spec endpoint 6), and connect a demo
provider with one, consuming it in the same transaction as the connection."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from healthledger.domain.connections.connecting import Connections
from healthledger.domain.connections.connection import AlreadyConnected
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    REDIRECT,
    TOKEN_CONSUMED,
    LinkToken,
    LinkTokenRejected,
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
from healthledger.domain.users.lifecycle import UserLifecycle


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

    def _lost_to(self, token_id: UUID) -> LedgerError:
        """What a connect lost to: another use of the token, or another connection of the
        same provider for the user (made through the team API meanwhile)."""
        token = self.ledger.find(token_id)
        if isinstance(token, LinkToken) and token.consumed_at is not None:
            return LinkTokenRejected(TOKEN_CONSUMED)
        return AlreadyConnected()
