"""A mobile SDK's one-time code (`link.code_create` of the official clients; issue 34):
the team's backend asks for it with its key, for one user, and hands it to the app on the
person's phone, which exchanges it once for a sign-in token (adapters/http/
sign_in_tokens.py). A code copied off a screen or a log line is thus worth one exchange
within minutes, and a code already exchanged is worth nothing.

issued -> redeemed (once). Expiry is by the clock at `expires_at`, which the team may set
up to MAX_LIFETIME ahead (DEFAULT_LIFETIME when it does not). The code text
(`hlc_<code id hex>_<secret>`) is shown once; only its SHA-256 is stored (keys.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import InvalidRequest, LedgerError
from healthledger.domain.keys import LINK_CODE, hash_key, key_matches, link_code_id, new_key
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.users.lifecycle import UserLifecycle

DEFAULT_LIFETIME = timedelta(hours=1)
MAX_LIFETIME = timedelta(hours=24)


class LinkCodeRejected(LedgerError):
    """Unknown, expired, used, or its user deleted since: all the same to the caller."""

    def __init__(self) -> None:
        super().__init__("The code is not valid, has expired or has been used.")


class LinkCode(Audited, created_event_name="Issued"):
    TOPIC = "healthledger:LinkCode"
    USER_STREAM = UserStream("link_code")

    class Event(Audited.Event):
        pass

    class Issued(Event, Aggregate.Created):
        TOPIC = "healthledger:LinkCode.Issued.v1"
        ANNOUNCES = ()
        team_id: UUID
        user_id: UUID
        environment: str
        code_hash: str
        expires_at: datetime

    Created = Issued

    class Redeemed(Event):
        """Exchanged for a sign-in token: the code is used up."""

        TOPIC = "healthledger:LinkCode.Redeemed.v1"
        ANNOUNCES = ()

        def apply(self, code: LinkCode) -> None:
            code.redeemed_at = self.timestamp

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
        code_hash: str,
        expires_at: datetime,
    ) -> None:
        self.team_id: UUID = team_id
        self.user_id: UUID = user_id
        self.environment: str = environment
        self.code_hash: str = code_hash
        self.expires_at: datetime = expires_at
        self.redeemed_at: datetime | None = None

    @classmethod
    def issue(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        team_id: UUID,
        user_id: UUID,
        environment: str,
        expires_at: datetime,
    ) -> tuple[LinkCode, str]:
        """The new code and its text, which is never stored."""
        code_id, plain = new_key(LINK_CODE)
        code = cls.new(
            ctx,
            now,
            id=code_id,
            team_id=team_id,
            user_id=user_id,
            environment=environment,
            code_hash=hash_key(plain),
            expires_at=expires_at,
        )
        return code, plain

    def redeem(self, ctx: CommandContext, now: datetime) -> None:
        if self.redeemed_at is not None or now >= self.expires_at:
            raise LinkCodeRejected()
        self.record(ctx, now, self.Redeemed)


class LinkCodes:
    def __init__(self, ledger: Ledger, clock: Clock, users: UserLifecycle) -> None:
        self.ledger = ledger
        self.clock = clock
        self.users = users

    def issue(
        self,
        ctx: CommandContext,
        team_id: UUID,
        environment: str,
        user_id: UUID,
        expires_at: datetime | None,
    ) -> tuple[LinkCode, str]:
        """A code for a live user of the team, and its text (never stored). Raises
        InvalidRequest (an expiry past, or beyond MAX_LIFETIME) or UserNotFound."""
        now = self.clock()
        if expires_at is None:
            expires_at = now + DEFAULT_LIFETIME
        elif expires_at.tzinfo is None or not now < expires_at <= now + MAX_LIFETIME:
            raise InvalidRequest(
                "expires_at must be a moment with a time zone, in the next 24 hours.",
                "expires_at",
                "query",
            )
        self.users.load_live(team_id, user_id)
        code, plain = LinkCode.issue(
            ctx,
            now,
            team_id=team_id,
            user_id=user_id,
            environment=environment,
            expires_at=expires_at,
        )
        self.ledger.save(code)
        return code, plain

    def redeem(self, plain: str, request_id: str) -> LinkCode:
        """The code whose text this is, used up now. Raises LinkCodeRejected; a code
        exchanged twice at once is used by one (the other's save conflicts)."""
        code_id = link_code_id(plain)
        code = None if code_id is None else self.ledger.find(code_id)
        if not isinstance(code, LinkCode) or not key_matches(plain, code.code_hash):
            raise LinkCodeRejected()
        try:
            self.users.load_live(code.team_id, code.user_id)
        except LedgerError as exc:
            raise LinkCodeRejected() from exc
        code.redeem(
            CommandContext(actor=f"link_code:{code.id}", request_id=request_id), self.clock()
        )
        try:
            self.ledger.save(code)
        except IntegrityError as exc:
            raise LinkCodeRejected() from exc
        return code
