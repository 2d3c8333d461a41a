"""One delivery of one public event to one webhook endpoint, event-sourced: every attempt,
its status code, latency and outcome is in the delivery's history.

    pending -> succeeded                      (a 2xx within the timeout)
            -> pending (attempt n failed)     (retried on the schedule below)
            -> failed                         (the last try failed, or the endpoint is gone)
            -> dropped                        (the user was erased, the endpoint disabled or
                                               deleted: never sent, or, after an attempt
                                               of unknown outcome, possibly sent)
    succeeded | failed | dropped -> pending   (Replayed: a redelivery, same message id)

The record never claims less than what may have happened (issue 30): an attempt is
recorded as started (`AttemptStarted`, committed before the POST) and completed by its
outcome (`AttemptMade`). A started attempt with no outcome (its sender died, or is still
posting) is an attempt of unknown outcome: it counts as an attempt, and a drop after it
says "outcome unknown, possibly sent" instead of "never sent". A started attempt that
was not posted after all (its sender's round ran out of lease) is withdrawn
(`AttemptWithdrawn`).

Every POST made is recorded, also one made after the delivery left `pending` (a sender
whose lease ran out while another recorded the outcome, ADR 0019): it counts as an
attempt, a success makes the delivery `succeeded`, a failure changes nothing else.

The delivery holds no payload: the payload is built when it is sent, from the source event
(named by id and version) and the data it points at, by the rules in force at the source
event's own time. A user erased meanwhile has nothing left to build it from, so the
delivery is dropped, never sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

PENDING = "pending"
SUCCEEDED = "succeeded"
FAILED = "failed"
DROPPED = "dropped"
# Appended to a drop's reason when an attempt of unknown outcome was started before it.
POSSIBLY_SENT = "outcome unknown, possibly sent"

# gaps.md: the first attempt is at once; after a failure, the retries come immediately,
# then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h later (nine attempts in all); a
# failure of the last one is final.
RETRY_DELAYS = (
    timedelta(0),
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=10),
)
# A 2xx within this is a success; anything slower is a failure (gaps.md).
DELIVERY_TIMEOUT = timedelta(seconds=15)
# An endpoint whose deliveries have failed for this long, with no success since, is
# disabled (and that is recorded on the endpoint).
FAILING_TOO_LONG = timedelta(days=5)

_NAMESPACE = uuid.UUID("5b0f4f8e-2c61-5d7a-9e13-7a4c2b9d0e61")


# A keyed digest under the user's data key (the user's cipher's `digest`): bytes -> hex.
UsersDigest = Callable[[bytes], str]


def message_id_for(
    source_id: UUID,
    source_version: int,
    event_type: str,
    day: date | None,
    users_digest: UsersDigest | None = None,
) -> str:
    """The Standard Webhooks message id of a public event: derived from the event it
    announces, so every endpoint, every retry and every redelivery sends the same id.

    Keyed with the user's data key (`users_digest`, issue 29, ADR 0028): everything else
    it is derived from is in clear in the log, so an unkeyed id (uuid5, as before) lets
    anyone holding the log find the event type (`labtest.result.critical`) by trying
    each; keyed, no one can once the key is erased. The key never changes while the user
    exists, so the id stays stable for receivers' de-duplication. Unkeyed only where the
    key is gone already (`user.erased`, which says no health fact), and in the ids
    stored before, which receivers have seen."""
    key = f"{source_id}:{source_version}:{event_type}:{day.isoformat() if day else ''}"
    if users_digest is not None:
        return "msg_" + users_digest(b"message-id\x1f" + key.encode())[:32]
    return "msg_" + uuid.uuid5(_NAMESPACE, key).hex


# The types of a user's lifecycle (`user.deleted`, `user.deletion_undone`, `user.erased`):
# what the User stream says in clear already, and what the deletion report reads of
# deliveries after the erasure.
LIFECYCLE_PREFIX = "user."


def lifecycle_type_of(event_type: str, user_id: UUID | None) -> str | None:
    """The type a delivery keeps in clear beside its sealed form (ADR 0028): a user's
    lifecycle type, or a team-level type (about no user: no key to seal with, nothing
    personal); None for every other, which names the health data announced."""
    if user_id is None or event_type.startswith(LIFECYCLE_PREFIX):
        return event_type
    return None


class WebhookDelivery(Audited, created_event_name="Created"):
    TOPIC = "healthledger:WebhookDelivery"
    USER_STREAM = UserStream("webhook_delivery")

    class Event(Audited.Event):
        pass

    class CreatedV1(Event, Aggregate.Created):
        """A delivery as recorded before its event type was sealed: the type in clear
        (`labtest.result.critical`, `historical.data.glucose.created`: a health fact).
        Recorded no more; the service's start redacts those stored into `Created` (ADR
        0028)."""

        TOPIC = "healthledger:WebhookDelivery.Created.v1"
        ANNOUNCES = ()
        SUPERSEDED_BY = "healthledger:WebhookDelivery.Created.v2"
        endpoint_id: UUID
        team_id: UUID
        # None for a team-level event type (recorded so for a while: issue 35).
        user_id: UUID | None
        event_type: str
        message_id: str
        source_id: UUID
        source_version: int
        source_timestamp: datetime
        day: date | None
        log_position: int

    class Created(Event, Aggregate.Created):
        """A delivery recorded. Its event type is stored sealed with the user's key
        (SEALED_FACTS, ADR 0028): it names the health data announced. A type that says
        nothing of a person's health is also in clear, as `lifecycle_type`
        (`lifecycle_type_of`): a user's lifecycle (`user.*`), which the deletion report
        reads after the erasure (`user.erased` is recorded after it), and a team-level
        type (no user, no key)."""

        TOPIC = "healthledger:WebhookDelivery.Created.v2"
        ANNOUNCES = ()
        SEALED_FACTS = {"event_type": ERASED_PLACEHOLDER}
        PERSONAL_FIELDS = tuple(SEALED_FACTS)
        endpoint_id: UUID
        team_id: UUID
        # None for a team-level event type (about a team environment and no user).
        user_id: UUID | None
        event_type: str
        lifecycle_type: str | None
        message_id: str
        # The event announced: its stream, version and time, and the day for daily data.
        source_id: UUID
        source_version: int
        source_timestamp: datetime
        day: date | None
        # The announcing event's notification id: deliveries to one endpoint about one
        # user are sent in this order.
        log_position: int

    class AttemptStarted(Event):
        """A POST about to be made, recorded (committed) before it is: until its outcome
        is recorded (`AttemptMade` of the same attempt), the attempt's outcome is unknown,
        and the message was possibly sent."""

        TOPIC = "healthledger:WebhookDelivery.AttemptStarted.v1"
        ANNOUNCES = ()
        attempt: int

        def apply(self, delivery: WebhookDelivery) -> None:
            delivery.attempts = max(delivery.attempts, self.attempt)
            delivery.open_attempts = (*delivery.open_attempts, self.attempt)

    class AttemptWithdrawn(Event):
        """A started attempt that was not posted after all (its sender's round ran out of
        time within its lease): it never happened."""

        TOPIC = "healthledger:WebhookDelivery.AttemptWithdrawn.v1"
        ANNOUNCES = ()
        attempt: int

        def apply(self, delivery: WebhookDelivery) -> None:
            delivery.open_attempts = tuple(a for a in delivery.open_attempts if a != self.attempt)
            if delivery.attempts == self.attempt:
                delivery.attempts = self.attempt - 1

    class AttemptMade(Event):
        """One POST: its answer (or why there was none), how long it took, and what next.
        It completes the `AttemptStarted` of the same attempt number, if there was one."""

        TOPIC = "healthledger:WebhookDelivery.AttemptMade.v1"
        ANNOUNCES = ()
        attempt: int
        status_code: int | None
        latency_ms: float
        # success | failure
        outcome: str
        # Why a failure: http_<code>, redirect, timeout, connection_error, gone
        error: str | None
        # The next try, or None when this was the last one.
        next_attempt_at: datetime | None

        def apply(self, delivery: WebhookDelivery) -> None:
            # Never fewer than started: a late outcome of an older attempt (ADR 0019)
            # leaves the count where a newer start put it.
            delivery.attempts = max(delivery.attempts, self.attempt)
            if self.attempt in delivery.open_attempts:
                delivery.open_attempts = tuple(
                    a for a in delivery.open_attempts if a != self.attempt
                )
            delivery.last_status_code = self.status_code
            if self.outcome == "success":
                delivery.status = SUCCEEDED
                delivery.next_attempt_at = None
            elif delivery.status != PENDING:
                pass  # a late failure: the outcome recorded before it stands
            elif self.next_attempt_at is None:
                delivery.status = FAILED
                delivery.next_attempt_at = None
            else:
                delivery.next_attempt_at = self.next_attempt_at

    class Dropped(Event):
        """No more attempts. `reason` ends with POSSIBLY_SENT when an attempt of unknown
        outcome came before: the message was possibly sent."""

        TOPIC = "healthledger:WebhookDelivery.Dropped.v1"
        ANNOUNCES = ()
        reason: str

        def apply(self, delivery: WebhookDelivery) -> None:
            delivery.status = DROPPED
            delivery.next_attempt_at = None

    class Replayed(Event):
        """A redelivery asked for (management API or CLI): the same message, sent again."""

        TOPIC = "healthledger:WebhookDelivery.Replayed.v1"
        ANNOUNCES = ()

        def apply(self, delivery: WebhookDelivery) -> None:
            _reset(delivery, self.timestamp)

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        endpoint_id: UUID,
        team_id: UUID,
        user_id: UUID | None,
        event_type: str,
        message_id: str,
        source_id: UUID,
        source_version: int,
        source_timestamp: datetime,
        day: date | None,
        log_position: int,
        lifecycle_type: str | None = None,
    ) -> None:
        """From the Created event's fields (eventsourcing passes them all), at `create`
        and on every replay (a version 1 has no `lifecycle_type`). Once the user's key is
        gone the type reads as the placeholder, but for one kept in clear."""
        self.endpoint_id: UUID = endpoint_id
        self.team_id: UUID = team_id
        self.user_id: UUID | None = user_id
        self.event_type: str = lifecycle_type or event_type
        self.message_id: str = message_id
        self.source_id: UUID = source_id
        self.source_version: int = source_version
        self.source_timestamp: datetime = source_timestamp
        self.day: date | None = day
        # The sending state, set by `_reset` (and again at each redelivery: Replayed).
        self.status: str
        self.attempts: int
        self.last_status_code: int | None
        self.next_attempt_at: datetime | None
        _reset(self, timestamp)

    # The attempts started whose outcome is not recorded (unknown while a sender may still
    # be posting, for good once it died). A class default, so that a delivery that never
    # had one keeps its state as it was; a redelivery keeps them (they were possibly sent).
    open_attempts: tuple[int, ...] = ()

    @property
    def possibly_sent(self) -> bool:
        """Whether an attempt of unknown outcome was started."""
        return bool(self.open_attempts)

    @staticmethod
    def id_for(endpoint_id: UUID, message_id: str) -> UUID:
        return uuid.uuid5(_NAMESPACE, f"{endpoint_id}\x1f{message_id}")

    @classmethod
    def create(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        endpoint_id: UUID,
        team_id: UUID,
        user_id: UUID | None,
        event_type: str,
        source_id: UUID,
        source_version: int,
        source_timestamp: datetime,
        day: date | None,
        log_position: int,
        users_digest: UsersDigest | None = None,
    ) -> WebhookDelivery:
        message_id = message_id_for(source_id, source_version, event_type, day, users_digest)
        return cls.new(
            ctx,
            now,
            id=cls.id_for(endpoint_id, message_id),
            endpoint_id=endpoint_id,
            team_id=team_id,
            user_id=user_id,
            event_type=event_type,
            lifecycle_type=lifecycle_type_of(event_type, user_id),
            message_id=message_id,
            source_id=source_id,
            source_version=source_version,
            source_timestamp=source_timestamp,
            day=day,
            log_position=log_position,
        )

    def start_attempt(self, ctx: CommandContext, now: datetime) -> int:
        """Record that a POST is about to be made (to be committed before it is); the
        attempt's number, for its outcome. An attempt started before and never completed
        (a sender that died) stays one of unknown outcome, and counts."""
        attempt = self.attempts + 1
        self.record(ctx, now, self.AttemptStarted, attempt=attempt)
        return attempt

    def withdraw_attempt(self, ctx: CommandContext, now: datetime, attempt: int) -> None:
        """A started attempt that was not posted after all."""
        if attempt in self.open_attempts:
            self.record(ctx, now, self.AttemptWithdrawn, attempt=attempt)

    def record_attempt(
        self,
        ctx: CommandContext,
        now: datetime,
        *,
        attempt: int | None = None,
        status_code: int | None,
        latency_ms: float,
        error: str | None,
        retry_after: timedelta | None = None,
        final: bool = False,
        endless: bool = False,
    ) -> None:
        """Record a POST. A failure is retried on the schedule (no sooner than a 429's
        Retry-After) unless it was the last try or `final` (a 410), or the delivery is no
        longer pending (a late POST: another sender recorded the outcome). `attempt` is the
        number `start_attempt` gave (None: a POST that was not started, the next number).
        `endless` (an event destination's message, which is never given up: its
        destination is disabled instead) retries past the schedule at its last delay."""
        if attempt is None:
            attempt = self.attempts + 1
        success = error is None
        next_at = None
        late = self.status != PENDING
        if not success and not final and not late and (endless or attempt <= len(RETRY_DELAYS)):
            delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS)) - 1]
            if retry_after is not None:
                delay = max(delay, retry_after)
            next_at = now + delay
        self.record(
            ctx,
            now,
            self.AttemptMade,
            attempt=attempt,
            status_code=status_code,
            latency_ms=round(latency_ms, 3),
            outcome="success" if success else "failure",
            error=error,
            next_attempt_at=next_at,
        )

    def drop(self, ctx: CommandContext, now: datetime, reason: str) -> None:
        """No more attempts; a drop after an attempt of unknown outcome says so."""
        if self.status == PENDING:
            if self.possibly_sent:
                reason = f"{reason}: {POSSIBLY_SENT}"
            self.record(ctx, now, self.Dropped, reason=reason)

    def replay(self, ctx: CommandContext, now: datetime) -> None:
        self.record(ctx, now, self.Replayed)


def _reset(delivery: WebhookDelivery, now: datetime) -> None:
    delivery.status = PENDING
    delivery.attempts = 0
    delivery.last_status_code = None
    delivery.next_attempt_at = now.astimezone(UTC)
