"""The makers' notices, from their webhook to a sync of just the days they name (issue 28,
ADR 0031).

A maker's webhook (`maker_notices.py` the port, the route in adapters/http) gives us
`MakerNotice`s. `receive` records each one durably, once, and does nothing else: no call
to the maker happens inside the maker's request, so it is answered fast. The pull
worker, woken by the commit (scheduler/pulls.py), then takes each notice and syncs the
named days of the named resources (`Pulls.sync_window`), or, for a deauthorization,
ends the connection on our side.

One stream per (notice, connection): `NoticeReceipt`, named by the service's keyed
digest of the notice's key (`notice_name`) and the connection. A notice sent again has
the same name: its save loses on the stream's first version and changes nothing. A
notice whose days were synced already (a late or out-of-order one) syncs them again, and
the health data store finds nothing new or changed: nothing is announced twice.

Taking a notice is recorded (`Taken`, at the version the worker read): two workers, in
one process or several, that pick the same notice both try to record it at the same
version and only one succeeds. A worker that dies with a notice taken leaves it due
again once the lease is over; a maker that fails the sync leaves it so too, up to
`max_attempts` takes, after which it is handled as failed (the daily sync still comes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.connections.connection import CONNECTED, PAUSED, Connection
from healthledger.domain.connections.maker_notices import MakerNotice
from healthledger.domain.connections.pulling import Pulls, WindowNotSynced
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, PersonalDataVault

log = logging.getLogger("healthledger.maker_notices")

RECEIVED = "received"
TAKEN = "taken"
HANDLED = "handled"

# How a notice was handled (NoticeReceipt.Handled.outcome).
SYNCED = "synced"
DEAUTHORIZED = "deauthorized"
NOT_PULLING = "connection_not_pulling"
FAILED = "failed"

# The connection error type of a maker's deauthorization notice (gaps.md).
DEREGISTERED_PER_PROVIDER = "deregistered_per_provider"
_DEAUTHORIZED = "The person revoked this app's access at the provider; connect again."

_NAMESPACE = uuid.UUID("0b6f2e1c-4d7a-5c39-8e1f-2a9d3c5b7e60")

# Who records a maker's notice: a maker, unnamed (its name says which device the person
# uses: sealed in the receipt). Notices recorded before ADR 0032 name it ("maker:oura").
MAKER_ACTOR = "maker"

# (provider, the maker's account id) -> the ids of the live connections of that account.
ConnectionsOf = Callable[[str, str], Sequence[UUID]]
# (provider, a notice's key) -> the service's keyed digest of it (a stream's name).
NoticeName = Callable[[str, str], str]
# (now, limit) -> the notices a worker may take now.
DueNotices = Callable[[datetime, int], list[UUID]]


class NoticeReceipt(Audited, created_event_name="Received"):
    """One maker's notice about one connection, from its receipt to its handling."""

    TOPIC = "healthledger:NoticeReceipt"
    # The queue row (`maker_notices`) names no user: nothing of the user's to erase there.
    USER_STREAM = UserStream("maker_notice")

    class Event(Audited.Event):
        pass

    class ReceivedV1(Event, Aggregate.Created):
        """The maker told us, as recorded before the maker and the resources it named
        were sealed. Recorded no more; the service's start redacts those stored into
        `Received` (ADR 0028, ADR 0032)."""

        TOPIC = "healthledger:NoticeReceipt.Received.v1"
        ANNOUNCES = ()
        # Straight to the newest: a v1 record redacted now seals its window too.
        SUPERSEDED_BY = "healthledger:NoticeReceipt.Received.v3"
        user_id: UUID
        team_id: UUID
        connection_id: UUID
        provider: str
        # Our resource names; empty: every resource of the connection.
        resources: list[str]
        start: date
        end: date
        deauthorized: bool

    class ReceivedV2(Event, Aggregate.Created):
        """The maker told us, as recorded before the notice's window was sealed (the
        maker and the resources sealed, the days in clear). Recorded no more; the
        service's start redacts those stored into `Received` (revision 0035)."""

        TOPIC = "healthledger:NoticeReceipt.Received.v2"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:NoticeReceipt.Received.v3"
        SEALED_FACTS = {"provider": ERASED_PLACEHOLDER, "resources": []}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        team_id: UUID
        connection_id: UUID
        provider: str
        resources: list[str]
        start: date
        end: date
        deauthorized: bool

    class Received(Event, Aggregate.Created):
        """The maker told us; what it named, in our words (never its account id). The
        maker, the resources (a glucose monitor's glucose) and the window (on which days
        the person had data) are stored sealed with the user's key (SEALED_FACTS, ADR
        0032): once the key is gone, the window reads None."""

        TOPIC = "healthledger:NoticeReceipt.Received.v3"
        ANNOUNCES = ()
        SEALED_FACTS = {
            "provider": ERASED_PLACEHOLDER,
            "resources": [],
            "start": None,
            "end": None,
        }
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        user_id: UUID
        team_id: UUID
        connection_id: UUID
        provider: str
        # Our resource names; empty: every resource of the connection.
        resources: list[str]
        start: date
        end: date
        deauthorized: bool

    # eventsourcing would give the aggregate an unpinned `Created` of its own: the
    # founding event is Received, and Created names it too (as LinkToken's Issued).
    Created = Received

    class Taken(Event):
        """A worker claimed it (the claim: recorded at the version the worker read)."""

        TOPIC = "healthledger:NoticeReceipt.Taken.v1"
        ANNOUNCES = ()
        attempt: int
        # The end of the taker's lease: another worker may take it over from then.
        until: datetime

        def apply(self, receipt: NoticeReceipt) -> None:
            receipt.status = TAKEN
            receipt.attempts = self.attempt
            receipt.taken_until = self.until

    class Delivered(Event):
        """What the maker delivered with the notice (a Garmin push's records, a ping's
        callback URLs: MakerNotice.delivery), sealed with the user's key: recorded with
        Received, in the same transaction, before the maker is answered, for the maker
        does not send it again. Erased with the user (its key destroyed)."""

        TOPIC = "healthledger:NoticeReceipt.Delivered.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = ("sealed_delivery",)
        sealed_delivery: str

        def apply(self, receipt: NoticeReceipt) -> None:
            receipt.sealed_delivery = self.sealed_delivery

    class Handled(Event):
        """Done: the window synced (what changed is the feeds' DailySynced, which
        announce it), the connection ended, or given up."""

        TOPIC = "healthledger:NoticeReceipt.Handled.v1"
        ANNOUNCES = ()
        outcome: str
        days_created: int
        days_updated: int

        def apply(self, receipt: NoticeReceipt) -> None:
            receipt.status = HANDLED
            receipt.outcome = self.outcome
            # What was delivered is stored now (or given up): the log keeps it sealed,
            # the aggregate (and the cache of aggregates) need not.
            receipt.sealed_delivery = None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        user_id: UUID,
        team_id: UUID,
        connection_id: UUID,
        provider: str,
        resources: list[str],
        start: date | None,
        end: date | None,
        deauthorized: bool,
    ) -> None:
        """From the Received event's fields, at `receive` and on every replay."""
        self.user_id = user_id
        self.team_id = team_id
        self.connection_id = connection_id
        self.provider = provider
        self.resources = list(resources)
        # None once the user's key is gone (sealed): such a notice is synced no more.
        self.start = start
        self.end = end
        self.deauthorized = deauthorized
        self.status = RECEIVED
        self.attempts = 0
        self.taken_until: datetime | None = None
        self.outcome: str | None = None
        self.sealed_delivery: str | None = None

    @staticmethod
    def id_for(name: str, connection_id: UUID) -> UUID:
        """The stream of the notice named `name` (keyed digest) about one connection."""
        return uuid.uuid5(_NAMESPACE, f"{name}\x1f{connection_id}")

    def deliver(self, ctx: CommandContext, now: datetime, sealed_delivery: str) -> None:
        self.record(ctx, now, self.Delivered, sealed_delivery=sealed_delivery)

    def take(self, ctx: CommandContext, now: datetime, lease: timedelta) -> None:
        self.record(ctx, now, self.Taken, attempt=self.attempts + 1, until=now + lease)

    def handle(
        self,
        ctx: CommandContext,
        now: datetime,
        outcome: str,
        days_created: int = 0,
        days_updated: int = 0,
    ) -> None:
        self.record(
            ctx,
            now,
            self.Handled,
            outcome=outcome,
            days_created=days_created,
            days_updated=days_updated,
        )


@dataclass(frozen=True)
class Intake:
    """What one maker's request brought: notices recorded now, seen before, or about an
    account no live connection has (acknowledged and dropped)."""

    recorded: int = 0
    duplicates: int = 0
    unknown: int = 0


class MakerNotices:
    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        pulls: Pulls,
        *,
        connections_of: ConnectionsOf,
        notice_name: NoticeName,
        due_notices: DueNotices,
        lease: timedelta,
        max_attempts: int = 5,
        vault: PersonalDataVault | None = None,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.pulls = pulls
        self.connections_of = connections_of
        self.notice_name = notice_name
        self.due_notices = due_notices
        self.lease = lease
        self.max_attempts = max_attempts
        # Seals and opens what a maker delivered with a notice (its records), with the
        # user's key; a deployment without it takes no delivery.
        self.vault = vault

    # -- in the maker's request -----------------------------------------------------------

    def receive(self, notices: Sequence[MakerNotice], request_id: str) -> Intake:
        """Record each notice once per live connection of its account; no maker call."""
        recorded = duplicates = unknown = 0
        for notice in notices:
            # The maker is the actor; which one is sealed in the receipt (ADR 0032).
            ctx = CommandContext(actor=MAKER_ACTOR, request_id=request_id)
            ids = self.connections_of(notice.provider, notice.account_id)
            found = [
                c
                for c in map(self.ledger.find, ids)
                if isinstance(c, Connection) and c.provider == notice.provider and c.is_live
            ]
            if not found:
                unknown += 1
                continue
            name = self.notice_name(notice.provider, notice.key)
            for connection in found:
                receipt = NoticeReceipt.new(
                    ctx,
                    self.clock(),
                    id=NoticeReceipt.id_for(name, connection.id),
                    user_id=connection.user_id,
                    team_id=connection.team_id,
                    connection_id=connection.id,
                    provider=notice.provider,
                    resources=sorted(notice.resources),
                    start=notice.start,
                    end=notice.end,
                    deauthorized=notice.deauthorized,
                )
                if notice.delivery is not None:
                    if self.vault is None:
                        raise RuntimeError("a maker's delivery needs the vault to seal it")
                    sealed = self.vault.seal(connection.user_id, notice.delivery)
                    receipt.deliver(ctx, self.clock(), sealed)
                if self._save(receipt):
                    recorded += 1
                else:
                    duplicates += 1  # this notice's stream exists: sent again
        if unknown:
            # Counted, never named: the account id is the person's.
            log.info("%d maker notice(s) for no known connection dropped", unknown)
        return Intake(recorded, duplicates, unknown)

    # -- the worker -----------------------------------------------------------------------

    def run_due(self, limit: int = 200) -> int:
        """Take and handle the notices due now; how many were looked at."""
        ids = self.due_notices(self.clock(), limit)
        for notice_id in ids:
            self.run(notice_id)
        return len(ids)

    def run(self, notice_id: UUID) -> str | None:
        """Take one notice and handle it: its outcome, or None when it was not taken
        (handled already, or another worker holds it)."""
        ctx = CommandContext.system(SCHEDULER, f"notice-{self.pulls.holder}-{uuid4().hex[:8]}")
        receipt = self.ledger.find(notice_id)
        if not isinstance(receipt, NoticeReceipt) or receipt.status == HANDLED:
            return None
        now = self.clock()
        if receipt.taken_until is not None and receipt.taken_until > now:
            return None  # another worker holds it
        receipt.take(ctx, now, self.lease)
        if not self._save(receipt):
            return None  # another worker took it first
        connection = self.ledger.find(receipt.connection_id)
        if receipt.deauthorized:
            return self._end_connection(ctx, receipt, connection)
        if not isinstance(connection, Connection) or not connection.is_pulling:
            return self._handled(ctx, receipt, NOT_PULLING)
        if receipt.start is None or receipt.end is None:
            return self._handled(ctx, receipt, NOT_PULLING)  # the user's key is gone
        resources = receipt.resources or sorted(connection.resource_availability)
        delivery = self._delivery(receipt)
        if receipt.sealed_delivery is not None and delivery is None:
            return self._handled(ctx, receipt, NOT_PULLING)  # the user's key is gone
        created = updated = 0
        failed = False
        for resource in resources:
            feed_id = self.pulls.streams.feed_id(connection.id, connection.user_id, resource)
            try:
                synced = (
                    self.pulls.sync_window(feed_id, receipt.start, receipt.end)
                    if delivery is None
                    else self.pulls.sync_delivered(feed_id, delivery)
                )
            except WindowNotSynced:
                failed = True
                continue
            if synced is not None:
                created += len(synced[0])
                updated += len(synced[1])
        if failed and receipt.attempts < self.max_attempts:
            # Taken, not handled: due again when the lease ends (the days synced already
            # are found unchanged then).
            return None
        return self._handled(ctx, receipt, FAILED if failed else SYNCED, created, updated)

    def _delivery(self, receipt: NoticeReceipt) -> object | None:
        """What the maker delivered with the notice, opened (None: it only said what
        changed, or the user's key is gone: nothing of theirs to store)."""
        if receipt.sealed_delivery is None or self.vault is None:
            return None
        return self.vault.open(receipt.user_id, receipt.sealed_delivery)

    def _end_connection(
        self, ctx: CommandContext, receipt: NoticeReceipt, connection: object
    ) -> str | None:
        """The maker says the person revoked our access: the connection goes to `error`
        (deregistered_per_provider, announced as provider.connection.error), with the
        notice handled in the same transaction."""
        for _ in range(3):
            now = self.clock()
            changed = []
            if isinstance(connection, Connection) and connection.status in (CONNECTED, PAUSED):
                if connection.status == PAUSED:
                    connection.resume(ctx, now)  # `error` ends a connected one
                connection.error(ctx, now, DEREGISTERED_PER_PROVIDER, _DEAUTHORIZED)
                changed.append(connection)
            receipt.handle(ctx, now, DEAUTHORIZED)
            if self._save(receipt, *changed):
                return DEAUTHORIZED
            # The connection moved on meanwhile (a pull, a reconnection): read both again.
            receipt = self.ledger.find(receipt.id)  # type: ignore[assignment]
            if not isinstance(receipt, NoticeReceipt) or receipt.status != TAKEN:
                return None
            connection = self.ledger.find(receipt.connection_id)
        return None

    def _handled(
        self,
        ctx: CommandContext,
        receipt: NoticeReceipt,
        outcome: str,
        created: int = 0,
        updated: int = 0,
    ) -> str | None:
        receipt.handle(ctx, self.clock(), outcome, created, updated)
        return outcome if self._save(receipt) else None

    def _save(self, *aggregates: Audited) -> bool:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError:
            return False
        return True
