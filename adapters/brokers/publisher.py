"""The event destinations' publisher (issue 35, ADRs 0035 and 0055): the log's public
events, published to each destination's broker.

A destination follows the log by a cursor of its own (ADR 0055): a broker's messages
are a function of the log (which events announce which public events, each message's id
keyed with the user's data key, its body built when sent under the deprecation calendar
at the event's own date, its route by the destination's prefixes), so no record is kept
per message. The webhooks' outbox computes the same messages for the endpoints
(`Dispatcher.announced_after`). `publish_due`:

1. claims destinations whose cursor is behind the log and due (a lease per destination:
   one process publishes to a destination at a time, `DestinationLeases`);
2. per destination, reads the next stretch of the log after its cursor (up to 500
   announcing events), and picks the messages of its team environment that its routes
   take; a user erased has no body to build: skipped (the webhooks' drop), counted;
3. records the round as started (`PublishRound.Started`, committed before the first
   publish), publishes the messages in lanes, one per user, each in order with the
   broker's acknowledgement of each message and stopping at its first failure
   (`clients.py`), and records the round finished: what it published per user, and
   where the cursor goes. A failure keeps the cursor before the first message not
   acknowledged (with the ones acknowledged past it, which the next round skips) and
   retries the destination on the webhook schedule, past it at its last delay: a
   message to a broker is never given up;
4. a destination failing for the webhooks' disable period (5 days) is disabled
   (`EventDestination.Disabled`, reason `failing_for_5_days`; its cursor waits) and the
   team's admins are told in the log of the service and by that event, which announces
   the team-level webhook `event_destination.disabled` to the team environment's
   endpoints.

At least once: a process that dies between a publish and its round's record leaves the
round open and the lease to expire; the next round publishes the stretch again under the
same ids, which JetStream drops within its duplicate window and a consumer can drop by
`message_id`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Tracking
from healthledger.adapters.brokers.clients import (
    BrokerClient,
    Message,
    Published,
    PublishFailed,
    checked_address,
)
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.webhooks.dispatcher import (
    DEFAULT_LEASE,
    Dispatcher,
    Stretch,
    drop_recorder,
)
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.ledger import Clock
from healthledger.domain.webhooks.announcements import USER_ERASED
from healthledger.domain.webhooks.deliveries import (
    DELIVERY_TIMEOUT,
    FAILING_TOO_LONG,
    RETRY_DELAYS,
    message_id_for,
)
from healthledger.domain.webhooks.event_destination_management import (
    BrokerTarget,
    EventDestinations,
)
from healthledger.domain.webhooks.event_destinations import NATS, RABBITMQ, route_for
from healthledger.domain.webhooks.publish_rounds import PublishRound

log = logging.getLogger("healthledger.event_destinations")

# A broker client for a destination's settings and the address checked for its host.
Connect = Callable[[BrokerTarget, str, float], BrokerClient]
# Destinations claimed per round, and announcing events read per destination per round.
DESTINATIONS_PER_ROUND = 16
MESSAGES_PER_ROUND = 500
# Why a delivery to a destination recorded before its cursor is dropped (the start).
SUPERSEDED = "superseded: published by the destination's cursor (ADR 0055)"


@dataclass(frozen=True)
class Pending:
    """A message the destination takes: what its body is built from (`Payloads.build`),
    its place in the log and its keyed id."""

    position: int
    user_id: UUID
    team_id: UUID
    source_id: UUID
    source_version: int
    day: date | None
    event_type: str
    target: str
    message_id: str


def connect(target: BrokerTarget, connect_to: str, timeout: float) -> BrokerClient:
    """A client of the destination's kind (imported here: each kind's library loads only
    when a destination of it is published to)."""
    if target.kind == RABBITMQ:
        from healthledger.adapters.brokers.rabbitmq import RabbitMQClient

        return RabbitMQClient(target, connect_to, timeout)
    if target.kind == NATS:
        from healthledger.adapters.brokers.nats import NatsClient

        return NatsClient(target, connect_to, timeout)
    raise PublishFailed(f"unknown_kind_{target.kind}", connection_lost=True)


class EventPublisher:
    def __init__(
        self,
        dispatcher: Dispatcher,
        destinations: EventDestinations,
        leases: DestinationLeases,
        clock: Clock,
        *,
        timeout: timedelta = DELIVERY_TIMEOUT,
        lease: timedelta = DEFAULT_LEASE,
        connector: Connect = connect,
    ) -> None:
        self.dispatcher = dispatcher
        self.destinations = destinations
        self.leases = leases
        self.clock = clock
        self.timeout = timeout
        self.lease = lease
        self.connector = connector
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        # One open client per destination, made again when its settings change (a new
        # version of the destination: a rotated secret, another host) or it is lost.
        self._clients: dict[UUID, tuple[int, BrokerClient]] = {}

    def close(self) -> None:
        for _version, client in self._clients.values():
            client.close()
        self._clients.clear()

    def supersede_queued(self) -> int:
        """Drop the deliveries to event destinations still pending from before their
        cursors (revision 0051): each cursor starts before the first of them and
        publishes their messages under the same ids. None on an up-to-date database."""
        ctx = CommandContext.system(SCHEDULER)
        dropped = 0
        while rows := self.leases.queued_deliveries(MESSAGES_PER_ROUND):
            now = self.clock()
            done = self.dispatcher.record(
                [(row, drop_recorder(ctx, now, SUPERSEDED)) for row in rows]
            )
            if not done:
                break  # none could be recorded: leave them to the next start
            dropped += len(done)
        return dropped

    def publish_due(self) -> int:
        """Claim the destinations with messages due and publish a round of each; how many
        messages were published or skipped, and failed rounds (0: nothing was due)."""
        started = time.monotonic()
        claimed_at = self.clock()
        last = self.dispatcher.recorder.max_notification_id() or 0
        claimed = self.leases.claim(
            claimed_at, claimed_at + self.lease, self.holder, DESTINATIONS_PER_ROUND, last
        )
        # As the webhook sender: a publish starts only if it ends (a whole timeout) within
        # the lease's first half; the second half is for recording the round.
        deadline = started + (self.lease / 2 - self.timeout).total_seconds()
        done = 0
        try:
            for destination_id in claimed:
                done += self._publish(destination_id, deadline)
        finally:
            self.leases.release(self.holder, claimed)
        return done

    def _publish(self, destination_id: UUID, deadline: float) -> int:
        cursor = self.leases.cursor(destination_id)
        target = self.destinations.target(destination_id)
        if cursor is None or target is None:
            self._forget(destination_id)
            return 0
        after = self.leases.position(destination_id, cursor.tracking_name)
        stretch = self.dispatcher.announced_after(after, MESSAGES_PER_ROUND)
        if stretch is None:
            self._move(cursor.tracking_name, after)
            return 0
        acknowledged = set(cursor.acknowledged_past)
        work, skipped, already = self._messages(stretch, target, acknowledged)
        if not work and not skipped:
            # Nothing of the stretch is the destination's (or all of it was published by
            # a round that failed after it): no round to record.
            self._move(cursor.tracking_name, stretch.upto)
            return 0
        ctx = CommandContext.system(SCHEDULER, f"publish-{self.holder}-{uuid.uuid4().hex[:8]}")
        planned: dict[str, int] = {}
        for pending, _message in work:
            planned[str(pending.user_id)] = planned.get(str(pending.user_id), 0) + 1
        round_ = PublishRound.start(
            ctx,
            self.clock(),
            destination_id,
            target.team_id,
            cursor.rounds + 1,
            after,
            stretch.upto,
            planned,
        )
        try:
            self.dispatcher.ledger.save(round_)
        except IntegrityError:
            return 0  # another publisher started this round (its lease ran out under us)
        if not work:
            self._finish(ctx, round_, cursor, after, skipped=len(skipped), moved_to=stretch.upto)
            return len(skipped)
        try:
            client = self._client(target)
        except PublishFailed as failed:
            # Nothing was published: the cursor stays, with what was acknowledged past it.
            self._finish(
                ctx,
                round_,
                cursor,
                after,
                skipped=0,
                moved_to=after,
                acknowledged_past=sorted(acknowledged),
                failure=(failed.error, cursor.attempts + 1),
            )
            return 1
        outcomes = self._send(client, work, deadline)
        sent = [p for p, _message in work]
        return self._finished(ctx, round_, cursor, after, sent, outcomes, skipped, already, stretch)

    def _finished(
        self,
        ctx: CommandContext,
        round_: PublishRound,
        cursor: Any,
        after: int,
        pending: Sequence[Pending],
        outcomes: Published,
        skipped: Sequence[int],
        already: Sequence[tuple[int, str]],
        stretch: Stretch,
    ) -> int:
        """Record what the round published and where the cursor goes: before the first
        message not acknowledged (failed, or withdrawn behind a failure or the deadline),
        with the ones acknowledged past it; else to the stretch's end."""
        failures = [o.failure for o in outcomes if o is not None and o.failure is not None]
        not_acknowledged = [
            p.position
            for p, o in zip(pending, outcomes, strict=True)
            if o is None or o.failure is not None
        ]
        moved_to = min(not_acknowledged) - 1 if not_acknowledged else stretch.upto
        acknowledged = [
            (p.position, p.message_id, p.user_id)
            for p, o in zip(pending, outcomes, strict=True)
            if o is not None and o.failure is None
        ]
        past = sorted(
            {message_id for position, message_id, _user in acknowledged if position > moved_to}
            | {message_id for position, message_id in already if position > moved_to}
        )
        # A message skipped past where the cursor stops is skipped again by the next
        # round, and counted there.
        passed = sum(1 for position in skipped if position <= moved_to)
        users: dict[str, int] = {}
        for _position, _message_id, user_id in acknowledged:
            users[str(user_id)] = users.get(str(user_id), 0) + 1
        failure = None
        if failures:
            failure = (failures[0].error, cursor.attempts + 1)
        self._finish(
            ctx,
            round_,
            cursor,
            after,
            skipped=passed,
            moved_to=moved_to,
            acknowledged_past=past,
            users=users,
            failure=failure,
        )
        if any(f.connection_lost for f in failures):
            self._forget(round_.destination_id)
        return len(acknowledged) + passed + (1 if failures else 0)

    def _finish(
        self,
        ctx: CommandContext,
        round_: PublishRound,
        cursor: Any,
        after: int,
        *,
        skipped: int,
        moved_to: int,
        acknowledged_past: list[str] | None = None,
        users: dict[str, int] | None = None,
        failure: tuple[str, int] | None = None,
    ) -> None:
        now = self.clock()
        error, attempt = failure if failure is not None else (None, 0)
        next_attempt_at = None
        if failure is not None:
            # The webhook schedule, and past it its last delay: never given up.
            next_attempt_at = now + RETRY_DELAYS[min(attempt, len(RETRY_DELAYS)) - 1]
        users = users or {}
        round_.finish(
            ctx,
            now,
            published=sum(users.values()),
            skipped_erased=skipped,
            users=users,
            cursor=moved_to,
            acknowledged_past=acknowledged_past or [],
            error=error,
            attempt=attempt,
            next_attempt_at=next_attempt_at,
        )
        # The cursor's move is saved with the round (the followers' exactly-once guard: a
        # round of a publisher whose lease ran out cannot move it twice).
        moves = moved_to > after
        tracking = Tracking(cursor.tracking_name, moved_to) if moves else None
        try:
            self.dispatcher.ledger.save(round_, tracking=tracking)
        except IntegrityError:
            log.warning(
                "a round of event destination %s met another publisher", round_.destination_id
            )
            return
        if error is not None:
            self._disable_if_failing_too_long(ctx, round_.destination_id, error)

    def _move(self, tracking_name: str, position: int) -> None:
        """Move the cursor past a stretch that held nothing for the destination."""
        with contextlib.suppress(IntegrityError):  # moved there or past it already
            self.dispatcher.ledger.save(tracking=Tracking(tracking_name, position))

    def _messages(
        self, stretch: Stretch, target: BrokerTarget, acknowledged: set[str]
    ) -> tuple[list[tuple[Pending, Message]], list[int], list[tuple[int, str]]]:
        """The stretch's messages the destination takes (its team environment's, of a
        type its routes take), each with its body built now; the log positions of those
        skipped (their user erased: nothing to build a body from); and those acknowledged
        already by a round that failed after them (position, message id), which are not
        published again."""
        dispatcher = self.dispatcher
        taken: list[Pending] = []
        already: list[tuple[int, str]] = []
        skipped: list[int] = []
        for message in stretch.messages:
            found = message.found
            # A team-level type goes to the team's endpoints only, never to a broker.
            if found.user_id is None or found.team_id != target.team_id:
                continue
            environment = dispatcher.environment_of(found.user_id)
            erased = environment is None
            if erased:
                environment = dispatcher.environment_at_creation(found.user_id)
            if environment != target.environment:
                continue
            routed = route_for(target.routes, found.event_type)
            if routed is None:
                continue
            if erased and found.event_type != USER_ERASED:
                skipped.append(message.position)
                continue
            event = message.event
            message_id = message_id_for(
                event.originator_id,
                event.originator_version,
                found.event_type,
                found.day,
                stretch.digests.get(found.user_id),
            )
            if message_id in acknowledged:
                already.append((message.position, message_id))
                continue
            taken.append(
                Pending(
                    message.position,
                    found.user_id,
                    found.team_id,
                    event.originator_id,
                    event.originator_version,
                    found.day,
                    found.event_type,
                    routed,
                    message_id,
                )
            )
        work: list[tuple[Pending, Message]] = []
        payloads = dispatcher.payloads
        with payloads.preloaded(taken):
            for pending in taken:
                body = payloads.build(
                    event_type=pending.event_type,
                    user_id=pending.user_id,
                    team_id=pending.team_id,
                    source_id=pending.source_id,
                    source_version=pending.source_version,
                    day=pending.day,
                )
                if body is None:  # erased meanwhile
                    skipped.append(pending.position)
                    continue
                work.append(
                    (
                        pending,
                        Message(
                            pending.target,
                            pending.message_id,
                            pending.event_type,
                            body,
                            str(pending.user_id),
                        ),
                    )
                )
        return work, skipped, already

    def _send(
        self, client: BrokerClient, work: Sequence[tuple[Pending, Message]], deadline: float
    ) -> Published:
        return client.publish([message for _pending, message in work], deadline)

    def _client(self, target: BrokerTarget) -> BrokerClient:
        held = self._clients.get(target.destination_id)
        if held is not None and held[0] == target.version:
            return held[1]
        self._forget(target.destination_id)
        connect_to = checked_address(
            target.connection["host"],
            target.port,
            self.destinations.allowed,
            self.destinations.own_addresses,
        )
        client = self.connector(target, connect_to, self.timeout.total_seconds())
        self._clients[target.destination_id] = (target.version, client)
        return client

    def _forget(self, destination_id: UUID) -> None:
        held = self._clients.pop(destination_id, None)
        if held is not None:
            held[1].close()

    def _disable_if_failing_too_long(
        self, ctx: CommandContext, destination_id: UUID, error: str
    ) -> None:
        cursor = self.leases.cursor(destination_id)
        since = None if cursor is None else cursor.failing_since
        if since is None or self.clock() - since < FAILING_TOO_LONG:
            return
        if self.destinations.disable(ctx, destination_id, since, error):
            self._forget(destination_id)
            log.warning(
                "event destination %s disabled: failing since %s (%s); its messages are kept",
                destination_id,
                since.isoformat(),
                error,
            )
