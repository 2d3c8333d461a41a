"""The webhook dispatcher: the outbox that follows the event log, and the sender.

`follow` reads the notification log from its tracking position, turns each event into the
public events it announces (`domain/webhooks/announcements.py`), and records a `WebhookDelivery`
per subscribed endpoint, in the transaction that moves the tracking position on: a
delivery is created exactly once per (event, endpoint), even with several dispatchers.

`send_due` claims the deliveries that are due (a lease per delivery, `DeliveryLeases`),
records the round's attempts as started (one commit, before any POST), posts them, signed
(Standard Webhooks, both header families), and records each outcome (one commit): every
POST made is recorded, even one that overlapped another sender's, and no POST is made
that was not recorded first. Delivery is at least once: a crash between a POST and its
outcome leaves an attempt of unknown outcome (possibly sent) and the lease to expire, and
the delivery is sent again, with the same message id, which receivers deduplicate (ADR
0019; issue 30).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

import httpx
from eventsourcing.persistence import IntegrityError, Tracking
from healthledger.adapters.outbound import retry_after, tls_context
from healthledger.adapters.persistence.engine.schema import team_api_keys, users
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from healthledger.adapters.persistence.eventstore.sealed_facts import keys_preloaded
from healthledger.adapters.persistence.leases.webhook_deliveries import DeliveryLeases
from healthledger.adapters.persistence.queries.webhooks import WebhookQueries
from healthledger.adapters.webhooks.destinations import (
    DestinationRefused,
    GuardedBackend,
    GuardedTransport,
)
from healthledger.adapters.webhooks.payloads import Payloads, RulesAt
from healthledger.adapters.webhooks.signing import signed_headers
from healthledger.domain.audited import audited_events, topic_of
from healthledger.domain.context import (
    DEFAULT_ENVIRONMENT,
    SCHEDULER,
    CommandContext,
    attributed,
)
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.announcements import USER_ERASED, Announcement, announcements
from healthledger.domain.webhooks.deliveries import (
    DELIVERY_TIMEOUT,
    FAILING_TOO_LONG,
    PENDING,
    UsersDigest,
    WebhookDelivery,
)
from healthledger.domain.webhooks.endpoints import ENDPOINT_GONE
from healthledger.domain.webhooks.endpoints import FAILING_TOO_LONG as DISABLED_FAILING
from healthledger.domain.webhooks.event_destinations import EventDestination
from healthledger.domain.webhooks.event_types import subscribed
from healthledger.domain.webhooks.management import WebhookEndpoints
from sqlalchemy import select

log = logging.getLogger("healthledger.webhooks")

TRACKING_NAME = "webhooks"
# The events that announce something (each declares what: its `ANNOUNCES`): the follower
# reads only their topics (it skips the rest in SQL), and only a commit holding one (or a
# redelivery) wakes it at once.
ANNOUNCING_EVENTS: tuple[type, ...] = tuple(e for e in audited_events() if e.ANNOUNCES)
ANNOUNCING_TOPICS: tuple[str, ...] = tuple(topic_of(cls) for cls in ANNOUNCING_EVENTS)
# What a commit may hold that gives the dispatcher work at once (`gives_work`): an event
# to announce, or a redelivery that makes a delivery due again.
# A resumed event destination has its kept messages to publish (issue 35).
_WORK_EVENTS = (*ANNOUNCING_EVENTS, WebhookDelivery.Replayed, EventDestination.Resumed)
_KEY_ACTOR = "team_api_key:"
# Users created by anything but a team API key (the CLI, a bootstrap) belong here.
_USER_AGENT = "healthledger-webhooks/1"
# How long a sender's claim on a delivery lasts (HEALTHLEDGER_WEBHOOK_LEASE's default),
# and its least length in POST timeouts: posts end within its first half, and at least a
# whole timeout is left for them after the claim.
DEFAULT_LEASE = timedelta(minutes=2)
LEASE_TIMEOUTS = 4
# The most a round claims once rounds are paced (`Dispatcher.round_size`).
MAX_CLAIM = 500
# Tries to record one attempt against other writers of the same delivery (a redelivery,
# a sender whose lease ran out) before it is logged as lost.
RECORD_TRIES = 5


@dataclass(frozen=True)
class Announced:
    """A public event announced by the event at `position` in the log."""

    position: int
    event: Any
    found: Announcement


@dataclass(frozen=True)
class Stretch:
    """A stretch of the log after a position, up to `upto` (`read` announcing events in
    it): the public events it announces, their users, and the users' keyed digests
    (what message ids are derived with; none for a user whose key is gone)."""

    upto: int
    read: int
    messages: list[Announced]
    people: set[UUID]
    digests: dict[UUID, UsersDigest]


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    latency_ms: float
    error: str | None
    retry_after: timedelta | None = None
    gone: bool = False


class Dispatcher:
    def __init__(
        self,
        ledger: Ledger,
        recorder: LedgerRecorder,
        clock: Clock,
        queries: WebhookQueries,
        endpoints: WebhookEndpoints,
        payloads: Payloads,
        rules_at: RulesAt,
        *,
        timeout: timedelta = DELIVERY_TIMEOUT,
        senders: int = 16,
        lease: timedelta = DEFAULT_LEASE,
        leases: DeliveryLeases | None = None,
    ) -> None:
        if lease < LEASE_TIMEOUTS * timeout:
            raise ValueError(f"a delivery's lease must be at least {LEASE_TIMEOUTS} POST timeouts")
        self.ledger = ledger
        self.recorder = recorder
        self.clock = clock
        self.queries = queries
        self.endpoints = endpoints
        self.payloads = payloads
        self.rules_at = rules_at
        self.senders = senders
        self.timeout = timeout
        self.lease = lease
        self.leases = leases or DeliveryLeases(recorder.db)
        # This sender's name on its leases (and in its records' request ids): the process
        # and this dispatcher, so that an operator can tell whose claim a lease is.
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        # Redirects are failures (never followed); no proxies from the environment. Each
        # connection goes to an address checked when it is made (`destinations.py`).
        limits = httpx.Limits(max_connections=senders * 2, max_keepalive_connections=senders)
        self.client = httpx.Client(
            timeout=timeout.total_seconds(),
            follow_redirects=False,
            trust_env=False,
            headers={"user-agent": _USER_AGENT},
            transport=GuardedTransport(
                GuardedBackend(endpoints.destinations, endpoints.own_addresses),
                verify=tls_context(trust_env=False),
                limits=limits,
            ),
        )
        self._environments: dict[UUID, str] = {}
        # How long a POST has taken lately (seconds, a moving average of the rounds'
        # posts; None before the first): what bounds a round's claim (`round_size`).
        self.post_seconds: float | None = None
        # How many a round may claim, from how the last rounds went (None: no round has
        # withdrawn anything yet); see `round_size`.
        self.claim_size: int | None = None

    def close(self) -> None:
        self.client.close()

    # -- the outbox -----------------------------------------------------------------------

    def follow(self, limit: int = 500) -> int:
        """Record the deliveries of the next notifications; how many were read."""
        position = self.recorder.max_tracking_id(TRACKING_NAME) or 0
        stretch = self.announced_after(position, limit)
        if stretch is None:
            return 0
        ctx = CommandContext.system(SCHEDULER)
        now = self.clock()
        deliveries: list[WebhookDelivery] = []
        # A team environment's endpoints, each with whether it receives an event type,
        # read once per round (a round is one transaction).
        endpoints: dict[tuple[UUID, str], list[tuple[UUID, Callable[[str], bool]]]] = {}
        for message in stretch.messages:
            found = message.found
            environment = self.environment_for(found)
            if environment is None:
                continue
            key = (found.team_id, environment)
            if key not in endpoints:
                endpoints[key] = self.recipients(*key)
            for endpoint_id, receives in endpoints[key]:
                if not receives(found.event_type):
                    continue
                deliveries.append(
                    WebhookDelivery.create(
                        ctx,
                        now,
                        endpoint_id=endpoint_id,
                        team_id=found.team_id,
                        user_id=found.user_id,
                        event_type=found.event_type,
                        source_id=message.event.originator_id,
                        source_version=message.event.originator_version,
                        source_timestamp=message.event.timestamp,
                        day=found.day,
                        log_position=message.position,
                        users_digest=(
                            None if found.user_id is None else stretch.digests.get(found.user_id)
                        ),
                    )
                )
        try:
            # Each delivery's type sealed with its user's key, the round's keys read once.
            with keys_preloaded(self.ledger.mapper, stretch.people):
                self.ledger.save(*deliveries, tracking=Tracking(TRACKING_NAME, stretch.upto))
        except IntegrityError:
            return 0  # another dispatcher recorded this stretch of the log first
        return stretch.read or 1

    def announced_after(self, position: int, limit: int = 500) -> Stretch | None:
        """The public events announced by the next `limit` announcing notifications after
        `position` (None: the log ends there): what the outbox records deliveries of, and
        what an event destination's publisher publishes (ADR 0055)."""
        last = self.recorder.max_notification_id() or 0
        if last <= position:
            return None
        notifications = self.recorder.select_notifications(
            position, limit, stop=last, topics=ANNOUNCING_TOPICS, inclusive_of_start=False
        )
        # Every id up to `last` that is not returned is an event that announces nothing
        # (ids are committed in order on both databases), so the position can pass it.
        upto = notifications[-1].id if len(notifications) == limit else last
        events = [attributed(self.ledger.mapper.to_domain_event(n)) for n in notifications]
        # The stretch's streams, and its users' environments and keys, read at once (a
        # few queries a round instead of some per event: issue 35's publishing rate).
        # Each stream as its first event made it: what an announcement reads of it (whose
        # it is, its team, its resource) never changes after, and one event is decoded
        # per stream instead of its whole history.
        streams = self.ledger.founded_many(list(dict.fromkeys(e.originator_id for e in events)))
        messages = [
            Announced(notification.id, event, found)
            for notification, event in zip(notifications, events, strict=True)
            for found in announcements(
                event,
                streams.get(event.originator_id),
                self.rules_at(event.timestamp),
                self.payloads.is_critical,
            )
        ]
        people = {m.found.user_id for m in messages if m.found.user_id is not None}
        self._remember_environments(people)
        # The users' keyed digests the message ids are derived with, once per user.
        digests = self._users_digests(people)
        return Stretch(upto, len(notifications), messages, people, digests)

    def environment_for(self, found: Announcement) -> str | None:
        """The team environment an announced event goes to: a team-level type's own, a
        user's environment; None for a user erased, but for `user.erased` itself (it
        carries nothing personal, and it tells a receiver's mirror to forget the user)."""
        if found.user_id is None:
            return found.environment
        environment = self.environment_of(found.user_id)
        if environment is None and found.event_type == USER_ERASED:
            environment = self.environment_at_creation(found.user_id)
        return environment

    def recipients(
        self, team_id: UUID, environment: str
    ) -> list[tuple[UUID, Callable[[str], bool]]]:
        """The team environment's enabled endpoints, each with whether it receives an
        event type (its filters). Event destinations follow the log themselves (ADR
        0055)."""
        return [
            (endpoint_id, partial(subscribed, filter_types))
            for endpoint_id, filter_types in self.queries.enabled_endpoints(team_id, environment)
        ]

    def _users_digests(self, user_ids: Collection[UUID]) -> dict[UUID, UsersDigest]:
        """The users' keyed digests a message id is derived with (ADR 0028), their keys
        read in one query; a user without one (its key destroyed: only `user.erased` is
        recorded then) is left out."""
        if not user_ids:
            return {}
        key_store = self.payloads.key_store
        keys = key_store.tables.keys
        with self.recorder.db.read() as conn:
            rows = conn.execute(
                select(keys.c.user_id, keys.c.wrapped_key).where(keys.c.user_id.in_(user_ids))
            ).all()
        found: dict[UUID, UsersDigest] = {}
        for row in rows:
            cipher = key_store.cipher_of(row.user_id, bytes(row.wrapped_key))
            if cipher is not None:
                found[row.user_id] = cipher.digest
        return found

    def _remember_environments(self, user_ids: Collection[UUID]) -> None:
        """`environment_of` for these users, the ones not remembered yet read in one
        query (an erased user, who has no row, is read again by `environment_of`)."""
        missing = [user_id for user_id in user_ids if user_id not in self._environments]
        if not missing:
            return
        with self.recorder.db.read() as conn:
            rows = conn.execute(
                select(users.c.user_id, users.c.environment).where(users.c.user_id.in_(missing))
            ).all()
        for row in rows:
            self._environments[row.user_id] = row.environment or DEFAULT_ENVIRONMENT

    @staticmethod
    def gives_work(event: object) -> bool:
        """Whether a committed event gives the dispatcher work at once (the scheduler wakes
        it for these only; its interval moves the position past the rest)."""
        return isinstance(event, _WORK_EVENTS)

    def environment_of(self, user_id: UUID) -> str | None:
        """The environment the user belongs to (the creating key's, kept by the users
        read model), remembered per user: it never changes. None for an erased user (no
        row): nothing of theirs is announced any more (`Payloads` would send nothing)."""
        found = self._environments.get(user_id)
        if found is None:
            with self.recorder.db.read() as conn:
                row = conn.execute(
                    select(users.c.environment).where(users.c.user_id == user_id)
                ).first()
            if row is None:
                return None
            found = self._environments[user_id] = row.environment or DEFAULT_ENVIRONMENT
        return found

    def environment_at_creation(self, user_id: UUID) -> str:
        """The environment of a user whose users row is gone (erased), from the log: what
        its Created event recorded (version 2), else, as migration 0002 found it for the
        row, the environment of the team API key that created it, else the default."""
        first = next(iter(self.ledger.events.get(user_id, lte=1)), None)
        if not isinstance(first, User.Created):
            return DEFAULT_ENVIRONMENT
        if first.environment is not None:
            return first.environment
        actor = attributed(first).actor
        if not actor.startswith(_KEY_ACTOR):
            return DEFAULT_ENVIRONMENT
        try:
            key_id = UUID(actor.removeprefix(_KEY_ACTOR))
        except ValueError:
            return DEFAULT_ENVIRONMENT
        with self.recorder.db.read() as conn:
            found: str | None = conn.execute(
                select(team_api_keys.c.environment).where(team_api_keys.c.key_id == key_id)
            ).scalar()
        return found or DEFAULT_ENVIRONMENT

    # -- the sender -----------------------------------------------------------------------

    # A round posts what it has time for, and no more is started.
    #
    # A claimed delivery that the round has no time left to post is recorded as started,
    # then withdrawn: two events for nothing. Under a backlog, starting every claimed
    # delivery made each round such pairs: with slow receivers, most of a round; on a
    # loaded database, where recording 500 starts took longer than the round's window,
    # all of it, round after round, with nothing posted (a livelock seen under ten kills:
    # deliveries that did not drain in five minutes while the log grew by a thousand
    # events a round). So a round claims no more than its senders can post at the pace
    # POSTs have lately gone, and no more than the last rounds managed (`round_size`:
    # halved by a round that withdrew anything, grown by a quarter by a full one that
    # did not), and starts of those only what each lane can post in order (`postable`);
    # the rest's leases are released with the round's, unrecorded, for the next round.

    def per_sender(self) -> int | None:
        """How many POSTs one sender can make in a round at the recent pace (None before
        any was timed)."""
        if self.post_seconds is None:
            return None
        window = (self.lease / 2 - self.timeout).total_seconds()
        return max(1, int(window / max(self.post_seconds, 0.001)))

    def round_size(self, limit: int) -> int:
        """How many due deliveries a round claims: at most `limit`, what the last rounds
        managed (`claim_size`) and what all its senders can post."""
        size = limit if self.claim_size is None else min(limit, self.claim_size)
        per_sender = self.per_sender()
        if per_sender is not None:
            size = min(size, self.senders * per_sender)
        return max(1, size)

    def postable(self, work: list[Any]) -> list[Any]:
        """Of a round's `work` (rows first, in claim order), what it has time to post: in
        each (endpoint, user) lane the earliest in log order that one sender can post, and
        lanes in claim order while all senders can."""
        per_sender = self.per_sender()
        if per_sender is None:
            return work
        lanes: dict[tuple[UUID, UUID], list[Any]] = {}
        for item in work:
            lanes.setdefault((item[0].endpoint_id, item[0].user_id), []).append(item)
        room = self.senders * per_sender
        kept: list[Any] = []
        for lane in lanes.values():
            taken = sorted(lane, key=lambda item: item[0].log_position)[: min(per_sender, room)]
            kept.extend(taken)
            room -= len(taken)
            if room <= 0:
                break
        return kept

    def _observed(self, claimed: int, size: int, results: Sequence[PostResult | None]) -> None:
        """Fold a round of `claimed` deliveries (of `size` asked for) into `post_seconds`
        and `claim_size`."""
        posted = [r for r in results if r is not None]
        # A POST lasts between nothing and its lease: a latency outside is a clock that
        # jumped between its two readings (a test's frozen clock read by one and not the
        # other), and would size the next rounds at one POST each.
        lease = self.lease.total_seconds()
        taken = [r.latency_ms / 1000 for r in posted if 0 <= r.latency_ms <= lease * 1000]
        if taken:
            mean = sum(taken) / len(taken)
            last = self.post_seconds
            self.post_seconds = mean if last is None else 0.5 * last + 0.5 * mean
        if len(posted) < len(results):  # some were withdrawn: the round was too big
            self.claim_size = max(1, claimed // 2)
        elif self.claim_size is not None and claimed >= size:
            self.claim_size = min(MAX_CLAIM, self.claim_size + max(1, self.claim_size // 4))

    def send_due(self, limit: int = 500) -> int:
        """Claim up to `limit` due deliveries (fewer when POSTs are slow: `round_size`),
        attempt them; how many were attempted or dropped."""
        # Read before the claim: the lease is counted from here, never from later.
        started = time.monotonic()
        claimed_at = self.clock()
        size = self.round_size(limit)
        rows = self.leases.claim_due(claimed_at, claimed_at + self.lease, self.holder, size)
        if not rows:
            return 0
        # A POST is started only if it ends (a whole timeout) within the lease's first half:
        # none is running, and the attempts are recorded, before another sender may take
        # the delivery over; the second half is the recording's.
        post_deadline = started + (self.lease / 2 - self.timeout).total_seconds()
        ctx = CommandContext.system(SCHEDULER, f"send-{self.holder}-{uuid.uuid4().hex[:8]}")
        bodies: dict[str, bytes | None] = {}
        targets: dict[UUID, tuple[str, list[str]] | None] = {}
        aimed: list[tuple[Any, tuple[str, list[str]]]] = []
        work: list[tuple[Any, str, list[str], bytes]] = []
        dropped: list[tuple[Any, str]] = []
        for row in rows:
            if row.endpoint_id not in targets:
                targets[row.endpoint_id] = self._target(row.endpoint_id)
            target = targets[row.endpoint_id]
            if target is None:
                dropped.append((row, "endpoint disabled or deleted"))
            else:
                aimed.append((row, target))
        # Only what the round has time to post is built: the rest of a user's backlog is
        # claimed again by the next rounds, and built then (not once per round).
        aimed = self.postable(aimed)
        chosen = [row for row, _target in aimed]
        # The rows hold their types sealed (ADR 0028): opened with the users' keys, once.
        # The bodies are built from what the round reads at once (`preloaded`): a sync's
        # round announces days of each resource, read from the same blocks.
        with self.payloads.preloaded(chosen):
            types = self.payloads.event_types(chosen)
            for (row, target), event_type in zip(aimed, types, strict=True):
                if row.message_id not in bodies:
                    built = (
                        None if event_type is None else self.payloads.of_delivery(row, event_type)
                    )
                    bodies[row.message_id] = built
                body = bodies[row.message_id]
                if body is None:
                    dropped.append((row, "user erased"))
                    continue
                work.append((row, target[0], target[1], body))
        # Each attempt is recorded as started before its POST, the round's in one commit:
        # whatever happens to this process from here, the record never says less than
        # what may have been sent. A delivery no longer pending (settled or dropped since
        # the claim) is not posted, nor one whose start could not be recorded.
        attempts = self.start(ctx, [row for row, *_rest in work])
        work = [item for item in work if item[0].delivery_id in attempts]
        # In parallel across (endpoint, user) pairs; in log order within each, so that a
        # receiver sees a user's connection created before its error.
        lanes: dict[tuple[UUID, UUID], list[int]] = {}
        for index, (row, *_rest) in enumerate(work):
            lanes.setdefault((row.endpoint_id, row.user_id), []).append(index)
        results: list[PostResult | None] = [None] * len(work)

        def run_lane(indexes: list[int]) -> None:
            for index in sorted(indexes, key=lambda i: work[i][0].log_position):
                if time.monotonic() > post_deadline:
                    return  # the lane's rest is claimed again by the next round
                results[index] = self._post(*work[index])

        with ThreadPoolExecutor(max_workers=self.senders) as pool:
            list(pool.map(run_lane, lanes.values()))
        self._observed(len(rows), size, results)
        now = self.clock()
        # What to record on each delivery, as a function, so that it can be redone on a
        # fresh copy if the batch loses to another sender.
        records: list[tuple[Any, Callable[[WebhookDelivery], bool]]] = []
        gone: set[UUID] = set()
        failing: set[UUID] = set()
        withdrawn = 0
        for (row, _url, _secrets, _body), result in zip(work, results, strict=True):
            attempt = attempts[row.delivery_id]
            if result is None:
                # Not posted (the round's time ran out): the start is withdrawn, and the
                # lease released below.
                records.append((row, withdraw_recorder(ctx, now, attempt)))
                withdrawn += 1
                continue
            records.append((row, attempt_recorder(ctx, now, result, attempt)))
            if result.gone:
                gone.add(row.endpoint_id)
            elif result.error is not None:
                failing.add(row.endpoint_id)
        for row, reason in dropped:
            records.append((row, drop_recorder(ctx, now, reason)))
        self.record(records)
        self.leases.release(self.holder, [row.delivery_id for row in rows])
        for endpoint_id in gone:
            self.endpoints.disable(ctx, endpoint_id, ENDPOINT_GONE)
        for endpoint_id in failing - gone:
            since = self.queries.failing_since(endpoint_id)
            if since is not None and now - since >= FAILING_TOO_LONG:
                self.endpoints.disable(ctx, endpoint_id, DISABLED_FAILING)
        return len(records) - withdrawn

    def _target(self, endpoint_id: UUID) -> tuple[str, list[str]] | None:
        endpoint = self.queries.endpoint(endpoint_id)
        if endpoint is None or endpoint["disabled"]:
            return None
        secrets = self.endpoints.signing_secrets(endpoint_id)
        return (endpoint["url"], secrets) if secrets else None

    def _post(self, row: Any, url: str, secrets: list[str], body: bytes) -> PostResult:
        headers = signed_headers(secrets, row.message_id, int(time.time()), body)
        headers["content-type"] = "application/json"
        started = time.perf_counter()
        try:
            response = self.client.post(url, content=body, headers=headers)
        except DestinationRefused as refused:  # nothing was sent
            return PostResult(None, _ms(started), f"address_refused: {refused}")
        except httpx.TimeoutException:
            return PostResult(None, _ms(started), "timeout")
        except httpx.TransportError:  # refused, reset, garbage that is not HTTP
            return PostResult(None, _ms(started), "connection_error")
        latency = _ms(started)
        code = response.status_code
        if 200 <= code < 300:
            return PostResult(code, latency, None)
        if 300 <= code < 400:
            return PostResult(code, latency, "redirect")
        if code == 410:
            return PostResult(code, latency, "gone", gone=True)
        wait = retry_after(response.headers.get("retry-after"), self.clock())
        return PostResult(code, latency, f"http_{code}", wait)

    def start(self, ctx: CommandContext, rows: Sequence[Any]) -> dict[UUID, int]:
        """Record an attempt started on each of these deliveries that is still pending, in
        one transaction (one by one if it meets another writer); per delivery whose start
        was recorded, the attempt's number. Only those may be posted."""
        if not rows:
            return {}
        now = self.clock()
        numbers: dict[UUID, int] = {}

        def record(delivery: WebhookDelivery) -> bool:
            if delivery.status != PENDING:
                return False
            numbers[delivery.id] = delivery.start_attempt(ctx, now)
            return True

        started = self.record([(row, record) for row in rows])
        return {delivery_id: numbers[delivery_id] for delivery_id in started}

    def record(self, records: Sequence[tuple[Any, Callable[[WebhookDelivery], bool]]]) -> set[UUID]:
        """Record the batch in one transaction. If another writer recorded one of its
        deliveries meanwhile (a sender whose lease ran out, a redelivery, an erasure), each
        is recorded on its own, on a fresh copy, so that no POST made goes unrecorded. The
        deliveries on which something was recorded."""
        batch = []
        # The batch's deliveries in two queries (streams and snapshots), not one each,
        # their types opened with their users' keys, read once for the batch.
        people = {row.user_id for row, _record in records if row.user_id is not None}
        with keys_preloaded(self.ledger.mapper, people):
            found: dict[UUID, Any] = dict(
                self.ledger.find_many([row.delivery_id for row, _record in records])
            )
        for row, record in records:
            delivery = found.get(row.delivery_id)
            if isinstance(delivery, WebhookDelivery) and record(delivery):
                batch.append(delivery)
        if not batch:
            return set()
        try:
            self.ledger.save(*batch)
            return {delivery.id for delivery in batch}
        except IntegrityError:
            log.info("a batch of delivery records met another writer: one by one")
        return {
            row.delivery_id for row, record in records if self._record_one(row.delivery_id, record)
        }

    def _record_one(self, delivery_id: UUID, record: Callable[[WebhookDelivery], bool]) -> bool:
        for _ in range(RECORD_TRIES):
            delivery = self.ledger.find(delivery_id)
            if not isinstance(delivery, WebhookDelivery) or not record(delivery):
                return False
            try:
                self.ledger.save(delivery)
                return True
            except IntegrityError:
                continue  # written meanwhile: record on the newer version
        log.warning("an attempt on delivery %s could not be recorded", delivery_id)
        return False


def attempt_recorder(
    ctx: CommandContext,
    now: datetime,
    result: PostResult,
    attempt: int | None = None,
    endless: bool = False,
) -> Callable[[WebhookDelivery], bool]:
    """The outcome of a POST (or a publish), completing its started `attempt` (None: one
    not started); `endless`: retried past the schedule (`record_attempt`)."""

    def record(delivery: WebhookDelivery) -> bool:
        # Whatever the delivery's state: the POST happened.
        delivery.record_attempt(
            ctx,
            now,
            attempt=attempt,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            error=result.error,
            retry_after=result.retry_after,
            final=result.gone,
            endless=endless,
        )
        return True

    return record


def withdraw_recorder(
    ctx: CommandContext, now: datetime, attempt: int
) -> Callable[[WebhookDelivery], bool]:
    """A started attempt that was not posted after all."""

    def record(delivery: WebhookDelivery) -> bool:
        if attempt not in delivery.open_attempts:
            return False
        delivery.withdraw_attempt(ctx, now, attempt)
        return True

    return record


def drop_recorder(
    ctx: CommandContext, now: datetime, reason: str
) -> Callable[[WebhookDelivery], bool]:
    def record(delivery: WebhookDelivery) -> bool:
        # Nothing was sent: a delivery no longer pending needs no drop.
        if delivery.status != PENDING:
            return False
        delivery.drop(ctx, now, reason)
        return True

    return record


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
