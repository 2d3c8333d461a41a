"""Link tokens (spec 2.5, endpoint 6; gaps.md Provider connections, link): a short-lived
credential that lets the hosted link page, or a team's own link widget, connect providers
for one user without the team API key.

issued -> consumed (by the first successful connection). Expiry is not an event: a token
is expired once LINK_TOKEN_LIFETIME has passed since it was issued, by the clock, so the
lifetime is a rule of the command methods and a change to it needs no new event.

The token text (`hll_<token id hex>_<secret>`) is shown once, in the answer to the issue;
only its SHA-256 is stored, like a key's (see keys.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import LedgerError
from healthledger.domain.keys import LINK_TOKEN, hash_key, key_matches, new_key
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

LINK_TOKEN_LIFETIME = timedelta(minutes=60)

# The only value on_error and on_close may take (spec 2.5).
REDIRECT = "redirect"

# Why a token cannot be used: the link error types of gaps.md, which the link page puts
# in its redirects and `isValid` reports.
INVALID_TOKEN = "invalid_token"
TOKEN_EXPIRED = "token_expired"
TOKEN_CONSUMED = "token_consumed"

_MESSAGES = {
    INVALID_TOKEN: "The link is not valid.",
    TOKEN_EXPIRED: "The link has expired; ask for a new one.",
    TOKEN_CONSUMED: "The link has already been used; ask for a new one.",
}


class LinkTokenRejected(LedgerError):
    """The token cannot be used; `error_type` is one of the three reasons above."""

    def __init__(self, error_type: str) -> None:
        super().__init__(_MESSAGES[error_type])
        self.error_type = error_type


def link_token_expiry(issued_at: datetime) -> datetime:
    return issued_at + LINK_TOKEN_LIFETIME


def link_token_problem(issued_at: datetime, consumed: bool, now: datetime) -> str | None:
    """Why a genuine token cannot be used at `now`, or None when it can.

    Shared by the aggregate (writes) and the read side (the link page, isValid), so both
    judge a token alike. A consumed token says so even after it has expired too: that is
    the more useful answer.
    """
    if consumed:
        return TOKEN_CONSUMED
    if now >= link_token_expiry(issued_at):
        return TOKEN_EXPIRED
    return None


def link_error_message(error_type: str) -> str:
    """A fixed message for a reason (never anything a caller or a user sent)."""
    return _MESSAGES[error_type]


class LinkToken(Audited, created_event_name="Issued"):
    TOPIC = "healthledger:LinkToken"
    USER_STREAM = UserStream("link_token", read_models=("read_model:link_tokens",))

    class Event(Audited.Event):
        pass

    class IssuedV1(Event, Aggregate.Created):
        """A token as recorded before its redirect_url was sealed: the URL in clear (a
        team's own URL, which may name the person: `?user=ada@example.org`). Recorded no
        more; the service's start redacts those stored into `Issued` (ADR 0028, ADR
        0032)."""

        TOPIC = "healthledger:LinkToken.Issued.v1"
        ANNOUNCES = ()
        # Straight to the newest: a v1 record redacted now seals its maker too.
        SUPERSEDED_BY = "healthledger:LinkToken.Issued.v3"
        team_id: UUID
        user_id: UUID
        environment: str
        token_hash: str
        provider: str | None
        redirect_url: str | None
        filter_on_providers: list[str] | None
        on_error: str | None
        on_close: str | None

    class IssuedV2(Event, Aggregate.Created):
        """A token as recorded before its maker was sealed: the redirect_url sealed, the
        `provider` and `filter_on_providers` (makers: a glucose monitor says the person
        is diabetic) in clear. Recorded no more; the service's start redacts those stored
        into `Issued` (revision 0044, ADR 0028, ADR 0032)."""

        TOPIC = "healthledger:LinkToken.Issued.v2"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:LinkToken.Issued.v3"
        SEALED_FACTS = {"redirect_url": None}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        team_id: UUID
        user_id: UUID
        environment: str
        token_hash: str
        provider: str | None
        redirect_url: str | None
        filter_on_providers: list[str] | None
        on_error: str | None
        on_close: str | None

    class Issued(Event, Aggregate.Created):
        """A token for one user of one team; the options of spec 2.5 as given. Stored
        sealed with the user's key (SEALED_FACTS, ADR 0032): the redirect_url (teams put
        their own identifiers of the person in it), and the maker the user is linking,
        `provider` and `filter_on_providers` (a health fact: a glucose monitor says the
        person is diabetic). Once the key is gone they read None (no redirect, no maker:
        the token of an erased user is dead anyway)."""

        TOPIC = "healthledger:LinkToken.Issued.v3"
        ANNOUNCES = ()
        SEALED_FACTS = {"redirect_url": None, "provider": None, "filter_on_providers": None}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        team_id: UUID
        user_id: UUID
        environment: str
        token_hash: str
        provider: str | None
        redirect_url: str | None
        filter_on_providers: list[str] | None
        on_error: str | None
        on_close: str | None

    # eventsourcing gives an aggregate a subclass of each event class of its bases
    # (`Aggregate.Created` among them) that it does not define by that name, which would
    # have no pinned topic; this aggregate's creation is called Issued, so Created names
    # it too (and `created_event_name` says which of the two names founds a token).
    Created = Issued

    class ConsumedV1(Event):
        """Used up, as recorded before the maker connected was sealed: `provider` in
        clear, and no user named. Recorded no more; the service's start redacts those
        stored into `Consumed`, the stream's owner given (revision 0044, ADR 0032)."""

        TOPIC = "healthledger:LinkToken.Consumed.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:LinkToken.Consumed.v2"
        provider: str

        def apply(self, token: LinkToken) -> None:
            token.consumed_at = self.timestamp
            token.consumed_provider = self.provider

    class Consumed(Event):
        """Used up by the connection to `provider`, recorded in the same transaction. The
        maker is stored sealed with the user's key (SEALED_FACTS, ADR 0032), which is why
        the event names the user; once the key is gone it reads as the placeholder."""

        TOPIC = "healthledger:LinkToken.Consumed.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        provider: str

        def apply(self, token: LinkToken) -> None:
            token.consumed_at = self.timestamp
            token.consumed_provider = self.provider

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        team_id: UUID,
        user_id: UUID,
        environment: str,
        token_hash: str,
        provider: str | None,
        redirect_url: str | None,
        filter_on_providers: list[str] | None,
        on_error: str | None,
        on_close: str | None,
    ) -> None:
        """From the Issued event's fields (eventsourcing passes them all), at `issue` and
        on every replay."""
        self.team_id: UUID = team_id
        self.user_id: UUID = user_id
        self.environment: str = environment
        self.token_hash: str = token_hash
        self.provider: str | None = provider
        self.redirect_url: str | None = redirect_url
        self.filter_on_providers: list[str] | None = filter_on_providers
        self.on_error: str | None = on_error
        self.on_close: str | None = on_close
        self.consumed_at: datetime | None = None
        self.consumed_provider: str | None = None

    @classmethod
    def issue(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        team_id: UUID,
        user_id: UUID,
        environment: str,
        provider: str | None,
        redirect_url: str | None,
        filter_on_providers: list[str] | None,
        on_error: str | None,
        on_close: str | None,
    ) -> tuple[LinkToken, str]:
        """The new token and its text, which is never stored."""
        token_id, plain = new_key(LINK_TOKEN)
        token = cls.new(
            ctx,
            now,
            id=token_id,
            team_id=team_id,
            user_id=user_id,
            environment=environment,
            token_hash=hash_key(plain),
            provider=provider,
            redirect_url=redirect_url,
            filter_on_providers=filter_on_providers,
            on_error=on_error,
            on_close=on_close,
        )
        return token, plain

    # -- rules ------------------------------------------------------------------------

    def matches(self, plain: str) -> bool:
        return key_matches(plain, self.token_hash)

    @property
    def expires_at(self) -> datetime:
        return link_token_expiry(self.created_on)

    def require_usable(self, now: datetime) -> None:
        problem = link_token_problem(self.created_on, self.consumed_at is not None, now)
        if problem is not None:
            raise LinkTokenRejected(problem)

    # -- commands ---------------------------------------------------------------------

    def consume(self, ctx: CommandContext, now: datetime, provider: str) -> None:
        self.require_usable(now)
        self.record(ctx, now, self.Consumed, user_id=self.user_id, provider=provider)
