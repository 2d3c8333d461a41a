"""Providers whose users sign in with credentials through a team's own link widget (issue
34; ADR 0038): a user name and password (with the maker's second factor when it asks for
one), or an e-mail address the maker sends a one-time code to.

The person types the credentials into the team's widget, which sends them with the link
token; we hand them to the maker's sign-in (the `CredentialMaker` port) and forget them:
a password is never recorded, logged or kept beyond the call. What the maker grants is
kept as the OAuth makers' grants are (provider_tokens.py: sealed with the user's key).

When the maker asks for a code (its MFA, or the e-mail code) the sign-in is pending: a
`CredentialSignIn` records the maker's challenge sealed with the user's key, for one
provider of one link token, and the code completes it once, within CHALLENGE_LIFETIME and
the token's own life. A second sign-in on the same link and provider replaces the
challenge. The link token is consumed only by the connection, as everywhere.

The maker is a health fact (`abbott_libreview`, a glucose monitor's: the person is
diabetic): the sign-in's events hold it sealed with the user's key (ADR 0032), and its
stream's id is keyed by that key (`StreamIds.sign_in_id`, ADR 0045), not derivable from
the link token's id and the provider by whoever holds the log (revision 0045).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.linking import LinkTokens
from healthledger.domain.connections.provider_tokens import GrantToKeep, ProviderTokens
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import InvalidRequest, LedgerError
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, PersonalDataVault
from healthledger.domain.users.user import User

# Makers' one-time codes live minutes; ours no longer.
CHALLENGE_LIFETIME = timedelta(minutes=10)

PASSWORD = "password"
EMAIL = "email"

# The link error types of a credential sign-in (the official clients' enumeration).
PROVIDER_CREDENTIAL_ERROR = "provider_credential_error"
PROVIDER_PASSWORD_EXPIRED = "provider_password_expired"
PROVIDER_API_ERROR = "provider_api_error"
INCORRECT_MFA_CODE = "incorrect_mfa_code"

_MESSAGES = {
    PROVIDER_CREDENTIAL_ERROR: "The provider did not accept these credentials.",
    PROVIDER_PASSWORD_EXPIRED: "The provider says the password has expired or the account "
    "is locked; the person must sign in at the provider first.",
    PROVIDER_API_ERROR: "The provider could not be reached; try again.",
    INCORRECT_MFA_CODE: "The code is not the one the provider sent, or has expired.",
}

MfaMethod = Literal["sms", "email"]


class SignInRefused(LedgerError):
    """The maker refused the sign-in; `error_type` is one of the four above. The message
    is fixed text: nothing the person typed or the maker answered."""

    def __init__(self, error_type: str) -> None:
        super().__init__(_MESSAGES[error_type])
        self.error_type = error_type


class NoPendingSignIn(LedgerError):
    """A code for a sign-in that asked for none, or whose code was used or expired."""

    def __init__(self) -> None:
        super().__init__("No sign-in of this provider is waiting for a code on this link.")


@dataclass(frozen=True)
class MakerGrant:
    """What a maker granted at a sign-in: the person's account and the tokens."""

    external_user_id: str = field(repr=False)
    tokens: ProviderTokens
    # The client the tokens were granted to (GrantToKeep's client_id).
    client_id: str


@dataclass(frozen=True)
class MakerChallenge:
    """The maker wants a code: its opaque id of the pending sign-in (a secret), how the
    code was sent and a hint of where (masked by the maker: never the full address)."""

    challenge: str = field(repr=False)
    method: MfaMethod
    hint: str = field(repr=False)


class CredentialMaker(Protocol):
    """The port of a maker whose users sign in with credentials. Each method raises
    SignInRefused."""

    # How its people sign in: PASSWORD, EMAIL or both.
    sign_ins: frozenset[str]

    def sign_in(
        self, username: str, password: str, region: str | None
    ) -> MakerGrant | MakerChallenge: ...

    def send_email_code(self, email: str, region: str | None) -> MakerChallenge: ...

    def complete(self, challenge: str, code: str) -> MakerGrant: ...


class CredentialSignIn(Audited, created_event_name="Challenged"):
    TOPIC = "healthledger:CredentialSignIn"
    USER_STREAM = UserStream("credential_sign_in")

    class Event(Audited.Event):
        pass

    class ChallengedV1(Event, Aggregate.Created):
        """A sign-in as recorded before its maker was sealed: `provider` in clear (a
        health fact). Recorded no more; the service's start redacts those stored into
        `Challenged` (revision 0045, ADR 0028, ADR 0032)."""

        TOPIC = "healthledger:CredentialSignIn.Challenged.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:CredentialSignIn.Challenged.v2"
        link_token_id: UUID
        team_id: UUID
        user_id: UUID
        provider: str
        auth_type: str
        method: str
        sealed_challenge: str

    class Challenged(Event, Aggregate.Created):
        """The maker asked for a code; its challenge is sealed with the user's key, and so
        is the maker (SEALED_FACTS, ADR 0032: the domain reads it in clear; once the key
        is gone it reads as the placeholder)."""

        TOPIC = "healthledger:CredentialSignIn.Challenged.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        link_token_id: UUID
        team_id: UUID
        user_id: UUID
        provider: str
        auth_type: str
        method: str
        sealed_challenge: str

    Created = Challenged

    class ChallengedAgain(Event):
        """Another sign-in on the same link: the new challenge replaces the old one."""

        TOPIC = "healthledger:CredentialSignIn.ChallengedAgain.v1"
        ANNOUNCES = ()
        auth_type: str
        method: str
        sealed_challenge: str

        def apply(self, sign_in: CredentialSignIn) -> None:
            sign_in.auth_type = self.auth_type
            sign_in.method = self.method
            sign_in.sealed_challenge = self.sealed_challenge
            sign_in.challenged_at = self.timestamp
            sign_in.answered_at = None

    class Answered(Event):
        """A code was given for the challenge (right or wrong): it is used up."""

        TOPIC = "healthledger:CredentialSignIn.Answered.v1"
        ANNOUNCES = ()
        accepted: bool

        def apply(self, sign_in: CredentialSignIn) -> None:
            sign_in.answered_at = self.timestamp

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
        auth_type: str,
        method: str,
        sealed_challenge: str,
    ) -> None:
        self.link_token_id: UUID = link_token_id
        self.team_id: UUID = team_id
        self.user_id: UUID = user_id
        self.provider: str = provider
        self.auth_type: str = auth_type
        self.method: str = method
        self.sealed_challenge: str = sealed_challenge
        self.challenged_at: datetime = timestamp
        self.answered_at: datetime | None = None

    @classmethod
    def challenge(
        cls,
        ctx: CommandContext,
        now: datetime,
        found: CredentialSignIn | None,
        sign_in_id: UUID,
        token: LinkToken,
        provider: str,
        auth_type: str,
        method: str,
        sealed_challenge: str,
    ) -> CredentialSignIn:
        """The pending sign-in of (token, provider): `found`, challenged again, or new
        under `sign_in_id` (`StreamIds.sign_in_id`: keyed by the user's key)."""
        if found is not None:
            found.record(
                ctx,
                now,
                cls.ChallengedAgain,
                auth_type=auth_type,
                method=method,
                sealed_challenge=sealed_challenge,
            )
            return found
        return cls.new(
            ctx,
            now,
            id=sign_in_id,
            link_token_id=token.id,
            team_id=token.team_id,
            user_id=token.user_id,
            provider=provider,
            auth_type=auth_type,
            method=method,
            sealed_challenge=sealed_challenge,
        )

    def require_pending(self, now: datetime) -> None:
        if self.answered_at is not None or now >= self.challenged_at + CHALLENGE_LIFETIME:
            raise NoPendingSignIn()

    def answer(self, ctx: CommandContext, now: datetime, accepted: bool) -> None:
        self.require_pending(now)
        self.record(ctx, now, self.Answered, accepted=accepted)


@dataclass(frozen=True)
class Pending:
    """The maker sent a code (`method`, to where `hint` says): complete with it."""

    method: str
    hint: str = field(repr=False)


# A credential maker of a provider slug, and the resources the catalog offers of it.
MakerOf = Callable[[str], CredentialMaker]


class CredentialLinks:
    """The use cases of credential sign-ins with a link token. `resources`: what the
    catalog offers of each provider; `maker_of` raises LookupError for a provider this
    deployment has no credential maker for."""

    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        vault: PersonalDataVault,
        link_tokens: LinkTokens,
        resources: Mapping[str, Sequence[str]],
        maker_of: MakerOf,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.vault = vault
        self.link_tokens = link_tokens
        self.resources = resources
        self.maker_of = maker_of

    def sign_in(
        self,
        plain: str,
        request_id: str,
        provider: str,
        username: str,
        password: str,
        region: str | None,
    ) -> LinkToken | Pending:
        """Sign in at a password provider's maker: connected (the token consumed), or
        pending the code the maker sent. Raises LinkTokenRejected, InvalidRequest (not a
        password provider of this link), SignInRefused or AlreadyConnected."""
        token, ctx, user = self.link_tokens.usable_for(plain, provider, request_id)
        outcome = self._maker(provider, PASSWORD).sign_in(username, password, region)
        if isinstance(outcome, MakerChallenge):
            return self._challenged(ctx, token, provider, PASSWORD, outcome)
        return self._connect(ctx, token, user, provider, outcome)

    def send_email_code(
        self, plain: str, request_id: str, provider: str, email: str, region: str | None
    ) -> Pending:
        """Ask an e-mail provider's maker to send the person a code; complete with it."""
        token, ctx, _ = self.link_tokens.usable_for(plain, provider, request_id)
        challenge = self._maker(provider, EMAIL).send_email_code(email, region)
        return self._challenged(ctx, token, provider, EMAIL, challenge)

    def complete(self, plain: str, request_id: str, provider: str, code: str) -> LinkToken:
        """The code of the pending sign-in of this link and provider: used once, right or
        wrong (a wrong one needs a new sign-in, as the makers' codes do). Raises
        LinkTokenRejected, InvalidRequest, NoPendingSignIn, SignInRefused or
        AlreadyConnected."""
        token, ctx, user = self.link_tokens.usable_for(plain, provider, request_id)
        found = self.ledger.find(self._sign_in_id(token, provider))
        if not isinstance(found, CredentialSignIn):
            raise NoPendingSignIn()
        now = self.clock()
        found.require_pending(now)
        challenge = self.vault.open(token.user_id, found.sealed_challenge)
        if not isinstance(challenge, str):
            raise NoPendingSignIn()
        try:
            grant = self._maker(provider, found.auth_type).complete(challenge, code)
        except SignInRefused:
            found.answer(ctx, self.clock(), accepted=False)
            self.ledger.save(found)
            raise
        found.answer(ctx, self.clock(), accepted=True)
        # Saved before the connection: a code is spent at the maker even if the
        # connection then loses to another one.
        self.ledger.save(found)
        return self._connect(ctx, token, user, provider, grant)

    # -- helpers --------------------------------------------------------------------------

    def _maker(self, provider: str, sign_in: str) -> CredentialMaker:
        """The provider's credential maker, when its people sign in by `sign_in`."""
        try:
            maker = self.maker_of(provider)
        except LookupError:
            maker = None
        if maker is None or sign_in not in maker.sign_ins:
            raise InvalidRequest(f"This provider does not sign in by {sign_in}.", "provider")
        return maker

    def _sign_in_id(self, token: LinkToken, provider: str) -> UUID:
        """The stream of the pending sign-in of (token, provider): keyed by the user's key
        (one made before revision 0045 is found under its old id)."""
        streams = self.link_tokens.connections.pulls.streams
        return streams.sign_in_id(token.user_id, token.id, provider)

    def _challenged(
        self,
        ctx: CommandContext,
        token: LinkToken,
        provider: str,
        auth_type: str,
        challenge: MakerChallenge,
    ) -> Pending:
        sign_in_id = self._sign_in_id(token, provider)
        found = self.ledger.find(sign_in_id)
        sign_in = CredentialSignIn.challenge(
            ctx,
            self.clock(),
            found if isinstance(found, CredentialSignIn) else None,
            sign_in_id,
            token,
            provider,
            auth_type,
            challenge.method,
            self.vault.seal(token.user_id, challenge.challenge),
        )
        self.ledger.save(sign_in)
        return Pending(challenge.method, challenge.hint)

    def _connect(
        self,
        ctx: CommandContext,
        token: LinkToken,
        user: User,
        provider: str,
        grant: MakerGrant,
    ) -> LinkToken:
        resources = self.resources.get(provider, ())
        adapter = self.link_tokens.connections.pulls.adapter_for(provider, False)
        return self.link_tokens.connect_granted(
            ctx,
            token,
            user,
            provider,
            grant.external_user_id,
            adapter.availability(resources),
            resources,
            GrantToKeep(token.user_id, token.team_id, provider, grant.client_id, grant.tokens),
        )
