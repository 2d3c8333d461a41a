"""One sign-in at a maker, started from the link page (docs/connections.md, the OAuth flow).

started -> returned (the maker sent the browser back to our callback, whatever it said).
A flow is used once: the callback claims it (`Returned`) before it spends the maker's
code, so a replayed callback finds it returned, however the first one ended. A flow
lives OAUTH_FLOW_LIFETIME (by the clock, not an event), and no longer than its link
token, which stays usable for another try until a connection consumes it.

The browser that started the flow holds its binding secret in a cookie (set by the link
page, sent only to the callback). The flow records only the secret's SHA-256, and the
PKCE code verifier is derived from the secret: a callback with the right state but
without the cookie of the browser that started it can neither be matched to the flow
nor redeem the maker's code. The `state` names the flow and carries a MAC keyed with the
link token's stored hash, so only the service makes one, one provider's is refused by
another's callback, and a state dies with its token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from datetime import datetime, timedelta
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

# Long enough to sign in at a maker (a forgotten password included), short enough that a
# state and its cookie do not linger; makers' codes themselves live about ten minutes.
OAUTH_FLOW_LIFETIME = timedelta(minutes=30)

# `hlo_<flow id hex>_<MAC>`: shaped like the other key texts (keys.py), a different kind.
OAUTH_STATE = "hlo"
_STATE = re.compile(r"^hlo_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$")


class InvalidOAuthState(LedgerError):
    """A callback whose state we did not make (missing, altered, another provider's)."""

    def __init__(self) -> None:
        super().__init__(
            "This sign-in cannot be matched to a link. Start again from the link you were sent."
        )


class OAuthFlowUsed(LedgerError):
    """The maker already sent this sign-in back once (a reload, or a replay)."""

    def __init__(self) -> None:
        super().__init__(
            "This sign-in has already been used. Start again from the link you were sent."
        )


class OAuthFlowExpired(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "This sign-in took too long and has expired. Start again from the link you were sent."
        )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def new_binding() -> str:
    """A fresh binding secret for the browser's cookie (256 bits)."""
    return secrets.token_urlsafe(32)


def binding_digest(binding: str) -> str:
    return hashlib.sha256(binding.encode()).hexdigest()


def pkce_verifier(binding: str, flow_id: UUID) -> str:
    """RFC 7636 code verifier of the flow: 43 unreserved characters derived from the
    browser's binding secret, so that only a callback carrying the cookie can present it."""
    message = f"healthledger pkce v1\x1f{flow_id.hex}".encode()
    return _b64(hmac.new(binding.encode(), message, hashlib.sha256).digest())


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: BASE64URL(SHA256(verifier)), unpadded."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


def _state_mac(flow_id: UUID, token: LinkToken, provider: str) -> str:
    message = f"healthledger oauth state v2\x1f{flow_id.hex}\x1f{token.id.hex}\x1f{provider}"
    return _b64(hmac.new(token.token_hash.encode(), message.encode(), hashlib.sha256).digest())


def flow_id_of_state(state: str) -> UUID | None:
    """The flow a well-formed state names, or None for anything else."""
    match = _STATE.match(state)
    return UUID(match.group(1)) if match else None


class OAuthFlow(Audited, created_event_name="Started"):
    TOPIC = "healthledger:OAuthFlow"
    USER_STREAM = UserStream("oauth_flow")

    class Event(Audited.Event):
        pass

    class StartedV1(Event, Aggregate.Created):
        """A flow as recorded before its maker was sealed: `provider` in clear (a health
        fact: a glucose monitor says the person is diabetic). Recorded no more; the
        service's start redacts those stored into `Started` (revision 0045, ADR 0028,
        ADR 0032)."""

        TOPIC = "healthledger:OAuthFlow.Started.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:OAuthFlow.Started.v2"
        link_token_id: UUID
        team_id: UUID
        user_id: UUID
        provider: str
        binding_digest: str

    class Started(Event, Aggregate.Created):
        """The link page sent the browser to the maker's authorization URL. The maker is
        stored sealed with the user's key (SEALED_FACTS, ADR 0032): the domain reads it in
        clear; once the key is gone it reads as the placeholder (no state matches it)."""

        TOPIC = "healthledger:OAuthFlow.Started.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        link_token_id: UUID
        team_id: UUID
        user_id: UUID
        provider: str
        # SHA-256 of the browser's binding secret: not the secret, not personal.
        binding_digest: str

    # As for LinkToken: the creation is called Started, and Created names it too, so that
    # eventsourcing derives no unpinned Created class.
    Created = Started

    class Returned(Event):
        """The maker sent the browser back to the callback: the flow is used up."""

        TOPIC = "healthledger:OAuthFlow.Returned.v1"
        ANNOUNCES = ()

        def apply(self, flow: OAuthFlow) -> None:
            flow.returned_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        link_token_id: UUID,
        team_id: UUID,
        user_id: UUID,
        provider: str,
        binding_digest: str,
    ) -> None:
        """From the Started event's fields, at `start` and on every replay."""
        self.link_token_id: UUID = link_token_id
        self.team_id: UUID = team_id
        self.user_id: UUID = user_id
        self.provider: str = provider
        self.binding_digest: str = binding_digest
        self.returned_at: datetime | None = None

    @classmethod
    def start(
        cls, ctx: CommandContext, now: datetime, token: LinkToken, provider: str, binding: str
    ) -> OAuthFlow:
        return cls.new(
            ctx,
            now,
            id=uuid4(),
            link_token_id=token.id,
            team_id=token.team_id,
            user_id=token.user_id,
            provider=provider,
            binding_digest=binding_digest(binding),
        )

    # -- rules ------------------------------------------------------------------------

    @property
    def expires_at(self) -> datetime:
        return self.created_on + OAUTH_FLOW_LIFETIME

    def state(self, token: LinkToken) -> str:
        """The `state` of the authorization URL (the flow's token is needed for its MAC)."""
        return f"{OAUTH_STATE}_{self.id.hex}_{_state_mac(self.id, token, self.provider)}"

    def has_state(self, state: str, token: LinkToken, provider: str) -> bool:
        """Whether `state` is this flow's, made for `provider` with its own token."""
        if token.id != self.link_token_id or provider != self.provider:
            return False
        return hmac.compare_digest(state, self.state(token))

    def bound_to(self, binding: str | None) -> bool:
        """Whether the cookie's binding secret is the one of the browser that started it."""
        if not binding:
            return False
        return hmac.compare_digest(binding_digest(binding), self.binding_digest)

    # -- commands ---------------------------------------------------------------------

    def come_back(self, ctx: CommandContext, now: datetime) -> None:
        """Claim the flow for the callback that came back with it: once, in time."""
        if self.returned_at is not None:
            raise OAuthFlowUsed()
        if now >= self.expires_at:
            raise OAuthFlowExpired()
        self.record(ctx, now, self.Returned)
