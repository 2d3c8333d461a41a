"""The event destinations' publisher (issue 35, ADR 0035): the webhook outbox's deliveries
to a broker, published.

The outbox (`Dispatcher.follow`) records a `WebhookDelivery` per (event, destination)
whose routes match, as it does per subscribed endpoint: the same message id (keyed with
the user's data key), the same body (built when sent, under the deprecation calendar at
the event's own date), the same drop when the user is erased. `publish_due` then:

1. claims destinations with a message due (a lease per destination: one process
   publishes to a destination at a time, `DestinationLeases`);
2. per destination, reads its queue in log order, leaving out a user's messages behind
   one of theirs that waits for a retry (`DestinationLeases.queue`);
3. records the round's attempts as started (one commit), publishes them in lanes, one
   per user, each in order with the broker's acknowledgement of each message and stopping
   at its first failure (`clients.py`), and records the outcomes (one commit):
   acknowledged, failed (retried on the webhook schedule, and past it at its last delay:
   a message to a broker is never given up), or withdrawn (not published in this round);
4. a destination failing for the webhooks' disable period (5 days) is disabled
   (`EventDestination.Disabled`, reason `failing_for_5_days`; its messages are kept) and
   the team's admins are told in the log of the service and by that event, which
   announces the team-level webhook `event_destination.disabled` to the team
   environment's endpoints.

At least once: a process that dies between a publish and its record leaves the attempt
open and the lease to expire; the message is published again with the same id, which
JetStream drops within its duplicate window and a consumer can drop by `message_id`.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.brokers.clients import (
    BrokerClient,
    Message,
    Published,
    PublishFailed,
    checked_address,
)
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.persistence.queries.webhooks import WebhookQueries
from healthledger.adapters.webhooks.dispatcher import (
    DEFAULT_LEASE,
    Dispatcher,
    PostResult,
    attempt_recorder,
    drop_recorder,
    withdraw_recorder,
)
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.ledger import Clock
from healthledger.domain.webhooks.deliveries import (
    DELIVERY_TIMEOUT,
    FAILING_TOO_LONG,
    WebhookDelivery,
)
from healthledger.domain.webhooks.event_destination_management import (
    BrokerTarget,
    EventDestinations,
)
from healthledger.domain.webhooks.event_destinations import NATS, RABBITMQ, route_for

log = logging.getLogger("healthledger.event_destinations")

# A broker client for a destination's settings and the address checked for its host.
Connect = Callable[[BrokerTarget, str, float], BrokerClient]
# Destinations claimed per round, and messages published per destination per round.
DESTINATIONS_PER_ROUND = 16
MESSAGES_PER_ROUND = 500
DROPPED_DESTINATION_GONE = "event destination deleted"
DROPPED_NO_ROUTE = "no route for the event type"
DROPPED_USER_ERASED = "user erased"


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
        queries: WebhookQueries,
        clock: Clock,
        *,
        timeout: timedelta = DELIVERY_TIMEOUT,
        lease: timedelta = DEFAULT_LEASE,
        connector: Connect = connect,
    ) -> None:
        self.dispatcher = dispatcher
        self.destinations = destinations
        self.leases = leases
        self.queries = queries
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

    def publish_due(self) -> int:
        """Claim the destinations with messages due and publish a round of each; how many
        messages were published, failed or dropped (0: nothing was due)."""
        started = time.monotonic()
        claimed_at = self.clock()
        claimed = self.leases.claim(
            claimed_at, claimed_at + self.lease, self.holder, DESTINATIONS_PER_ROUND
        )
        # As the webhook sender: a publish starts only if it ends (a whole timeout) within
        # the lease's first half; the second half is for recording the outcomes.
        deadline = started + (self.lease / 2 - self.timeout).total_seconds()
        done = 0
        try:
            for destination_id in claimed:
                done += self._publish(destination_id, deadline)
        finally:
            self.leases.release(self.holder, claimed)
        return done

    def _publish(self, destination_id: UUID, deadline: float) -> int:
        ctx = CommandContext.system(SCHEDULER, f"publish-{self.holder}-{uuid.uuid4().hex[:8]}")
        rows = self.leases.queue(destination_id, self.clock(), MESSAGES_PER_ROUND)
        if not rows:
            return 0
        target = self.destinations.target(destination_id)
        if target is None:
            self._forget(destination_id)
            now = self.clock()
            self.dispatcher.record(
                [(row, drop_recorder(ctx, now, DROPPED_DESTINATION_GONE)) for row in rows]
            )
            return len(rows)
        with self.dispatcher.payloads.preloaded(rows):
            work, dropped = self._messages(rows, target)
        records: list[tuple[Any, Callable[[Any], bool]]] = []
        try:
            client = self._client(target) if work else None
        except PublishFailed as failed:
            # Nothing was published: the failure is recorded on the first message only
            # (an outage writes one record per round, not one per message queued).
            now = self.clock()
            result = PostResult(None, 0.0, failed.error)
            records.append((work[0][0], attempt_recorder(ctx, now, result, endless=True)))
            records.extend((row, drop_recorder(ctx, now, reason)) for row, reason in dropped)
            self.dispatcher.record(records)
            self._disable_if_failing_too_long(ctx, destination_id, failed.error)
            return 1 + len(dropped)
        # The deliveries as their starts saved them: the outcomes are recorded on them,
        # not on copies read again (two queries and every stream decoded, per round).
        started: dict[UUID, WebhookDelivery] = {}
        attempts = self.dispatcher.start(ctx, [row for row, _message in work], started)
        work = [(row, message) for row, message in work if row.delivery_id in attempts]
        outcomes = self._send(target, client, [message for _row, message in work], deadline)
        now = self.clock()
        failures: list[PublishFailed] = []
        for (row, _message), outcome in zip(work, outcomes, strict=True):
            attempt = attempts[row.delivery_id]
            if outcome is None:  # behind a failure of its lane, or past the deadline
                records.append((row, withdraw_recorder(ctx, now, attempt)))
                continue
            error = None if outcome.failure is None else outcome.failure.error
            result = PostResult(None, outcome.latency_ms, error)
            records.append((row, attempt_recorder(ctx, now, result, attempt, endless=True)))
            if outcome.failure is not None:
                failures.append(outcome.failure)
        records.extend((row, drop_recorder(ctx, now, reason)) for row, reason in dropped)
        self.dispatcher.record(records, started)
        if any(failure.connection_lost for failure in failures):
            self._forget(destination_id)
        if failures:
            self._disable_if_failing_too_long(ctx, destination_id, failures[0].error)
        return sum(1 for outcome in outcomes if outcome is not None) + len(dropped)

    def _messages(
        self, rows: Sequence[Any], target: BrokerTarget
    ) -> tuple[list[tuple[Any, Message]], list[tuple[Any, str]]]:
        """Each row's message (its route's target and the body built now), or why it is
        dropped: its event type has no route any more, or its user was erased."""
        work: list[tuple[Any, Message]] = []
        dropped: list[tuple[Any, str]] = []
        payloads = self.dispatcher.payloads
        # The rows hold their types sealed (ADR 0028): opened with the users' keys, once;
        # routed by the type opened (a user erased has none: dropped).
        for row, event_type in zip(rows, payloads.event_types(rows), strict=True):
            if event_type is None:
                dropped.append((row, DROPPED_USER_ERASED))
                continue
            routed = route_for(target.routes, event_type)
            if routed is None:
                dropped.append((row, DROPPED_NO_ROUTE))
                continue
            body = payloads.of_delivery(row, event_type)
            if body is None:
                dropped.append((row, DROPPED_USER_ERASED))
                continue
            message = Message(routed, row.message_id, event_type, body, str(row.user_id))
            work.append((row, message))
        return work, dropped

    def _send(
        self,
        target: BrokerTarget,
        client: BrokerClient | None,
        messages: Sequence[Message],
        deadline: float,
    ) -> Published:
        if client is None or not messages:
            return [None] * len(messages)
        return client.publish(messages, deadline)

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
        since = self.queries.failing_since(destination_id)
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
