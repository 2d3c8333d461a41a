"""Webhook deliveries are claimed before they are sent (ADR 0019): two senders on one
database post each delivery once; a dead sender's lease is taken over once it expires,
never before; every POST made is recorded, also one that came after another sender had
recorded the outcome; and the read model agrees with the log (a rebuild changes nothing).
On both databases, with a real local receiver."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import stored_events, teams, webhook_deliveries
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks import dispatcher as dispatching
from healthledger.adapters.webhooks.dispatcher import Dispatcher, PostResult, attempt_recorder
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import func, select

from tests.clocks import Stopwatch
from tests.receivers import Receiver, http_receiver

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-leases")
LEASE = timedelta(seconds=30)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def lease_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"webhook_lease": LEASE, "webhook_timeout": timedelta(seconds=5)}
    )


@pytest.fixture
def svc(lease_settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(lease_settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


@pytest.fixture
def other(lease_settings: Settings, clock: Clock, svc: Service) -> Iterator[Service]:
    """A second process's service on the same database (its own dispatcher and holder)."""
    built = build_service(lease_settings, clock=clock)
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        running.slow_seconds = 0.05
        yield running


def queue_deliveries(svc: Service, receiver: Receiver, users: int, path: str = "ok") -> UUID:
    """An endpoint, `users` users with a demo device each, their deliveries recorded (not
    sent); the endpoint's id."""
    with svc.db.read() as conn:
        team = conn.execute(select(teams.c.team_id)).scalar_one()
    endpoint = svc.webhooks.create(CTX, team, "sandbox", url=receiver.url(path))
    for number in range(users):
        user = svc.users.create_user(CTX, team, client_user_id=f"lease-{number}")
        entry = svc.catalog["freestyle_libre"]
        svc.connections.connect_demo(CTX, team, user.id, entry.slug, entry.supported_resources)
    svc.jobs.run_due_pulls()
    while svc.dispatcher.follow():
        pass
    return endpoint.id


def delivery_rows(svc: Service) -> Sequence[Any]:
    with svc.db.read() as conn:
        return conn.execute(
            select(webhook_deliveries).order_by(webhook_deliveries.c.delivery_id)
        ).all()


def posts_by_message(receiver: Receiver) -> Counter[str]:
    return Counter(r.headers["webhook-id"] for r in receiver.received)


def test_two_senders_at_once_post_each_delivery_once(
    svc: Service, other: Service, receiver: Receiver
) -> None:
    queue_deliveries(svc, receiver, users=6, path="slow")
    queued = len(delivery_rows(svc))
    assert queued == 12  # a connection created and a glucose pull per user
    barrier = threading.Barrier(2)
    sent: list[int] = []

    def send(dispatcher: Dispatcher) -> None:
        barrier.wait()
        # Small batches, so that the two senders take turns at claiming.
        while attempted := dispatcher.send_due(limit=3):
            sent.append(attempted)

    threads = [threading.Thread(target=send, args=(s.dispatcher,)) for s in (svc, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    posts = posts_by_message(receiver)
    assert len(posts) == queued and set(posts.values()) == {1}
    assert sum(sent) == queued
    assert {(r.status, r.attempts) for r in delivery_rows(svc)} == {("succeeded", 1)}
    # Each lease ended with its delivery's record.
    assert svc.dispatcher.leases.held() == []


def test_a_dead_senders_lease_is_taken_over_after_it_expires_not_before(
    svc: Service, other: Service, receiver: Receiver, clock: Clock
) -> None:
    queue_deliveries(svc, receiver, users=2)
    # A sender claims everything, then dies before posting (its leases stay).
    claimed = svc.dispatcher.leases.claim_due(T0, T0 + LEASE, "dead-sender", limit=100)
    assert len(claimed) == 4
    assert other.dispatcher.send_due() == 0
    clock.now = T0 + LEASE - timedelta(seconds=1)
    assert other.dispatcher.send_due() == 0
    assert receiver.received == []
    clock.now = T0 + LEASE
    assert other.dispatcher.send_due() == 4
    assert set(posts_by_message(receiver).values()) == {1}
    assert {r.status for r in delivery_rows(svc)} == {"succeeded"}
    # The survivor's records name it: the request id carries the sender's holder name.
    attempt = list(svc.ledger.events.get(claimed[0].delivery_id))[-1]
    assert isinstance(attempt, WebhookDelivery.AttemptMade)
    assert attempt.request_id.startswith(f"send-{other.dispatcher.holder}-")
    assert svc.dispatcher.leases.held() == []


def test_a_late_post_is_recorded_and_the_outcome_recorded_first_stands(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    queue_deliveries(svc, receiver, users=1)
    (first, second) = delivery_rows(svc)
    assert svc.dispatcher.send_due() == 2
    # A sender whose lease ran out posted both too; one answer failed, one succeeded.
    ctx = CommandContext.system("system:scheduler", "send-late")
    failed = PostResult(500, 3.0, "http_500")
    succeeded = PostResult(200, 2.0, None)
    svc.dispatcher.record(
        [
            (first, attempt_recorder(ctx, clock(), failed)),
            (second, attempt_recorder(ctx, clock(), succeeded)),
        ]
    )
    rows = {r.delivery_id: r for r in delivery_rows(svc)}
    for row, code in ((first, 500), (second, 200)):
        delivery = svc.ledger.find(row.delivery_id)
        assert isinstance(delivery, WebhookDelivery)
        # Both posts are in the history; the success recorded first stands.
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (
            "succeeded",
            2,
            code,
        )
        view = rows[row.delivery_id]
        assert (view.status, view.attempts, view.next_attempt_at) == ("succeeded", 2, None)
    # Nothing is due again, and the read model is what the log rebuilds.
    assert svc.dispatcher.send_due() == 0
    before = delivery_rows(svc)
    svc.read_models.rebuild(svc.recorder, svc.ledger.mapper)
    assert delivery_rows(svc) == before


def test_a_lease_shorter_than_four_timeouts_is_refused(lease_settings: Settings) -> None:
    with pytest.raises(ValueError, match="at least 4 times"):
        Settings(
            database_url=lease_settings.database_url,
            webhook_timeout=timedelta(seconds=15),
            webhook_lease=timedelta(seconds=59),
        )


def withdrawn_attempts(svc: Service) -> int:
    topic = WebhookDelivery.AttemptWithdrawn.TOPIC
    with svc.db.read() as conn:
        return int(
            conn.execute(select(func.count()).where(stored_events.c.topic == topic)).scalar_one()
        )


@contextmanager
def stopwatch_service(
    settings: Settings,
    clock: Clock,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    users: int,
) -> Iterator[tuple[Service, Stopwatch, int]]:
    """A service whose dispatcher times its rounds and POSTs by a stopwatch that only the
    test moves on (the machine's speed decides nothing), with two deliveries queued for
    each of `users` users: the service, the stopwatch and how many were queued."""
    watch = Stopwatch()
    monkeypatch.setattr(dispatching, "time", watch.as_time_module())
    svc = build_service(settings, clock=clock)
    try:
        svc.bootstrap()
        queue_deliveries(svc, receiver, users=users)
        yield svc, watch, len(delivery_rows(svc))
    finally:
        svc.close()


def test_a_round_starts_only_what_it_has_time_to_post(
    settings: Settings, clock: Clock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog to a slow receiver: once POSTs are timed, a round claims and starts only
    what its senders can post before its time runs out, so no attempt is started and then
    withdrawn (two events for nothing, which under a backlog made every round mostly
    such pairs).

    The dispatcher's time is a stopwatch that only the POSTs move on (3 s each), so that
    how long the database takes to claim and record, on a loaded machine too, changes
    nothing: what is tested is the rounds' pacing, not the machine's speed (CI once saw
    a round's claim outlast its whole window on real time)."""
    # A round may post for lease / 2 - timeout = 10 s; each POST takes 3 s.
    paced = settings.model_copy(
        update={"webhook_lease": timedelta(seconds=40), "webhook_timeout": timedelta(seconds=10)}
    )
    stopwatched = stopwatch_service(paced, clock, receiver, monkeypatch, users=6)
    with stopwatched as (svc, watch, queued):
        assert queued == 12
        dispatcher = svc.dispatcher
        dispatcher.senders = 1
        post = dispatcher.client.post

        def slow_post(*args: Any, **kwargs: Any) -> Any:
            answer = post(*args, **kwargs)
            watch.advance(3.0)
            return answer

        monkeypatch.setattr(dispatcher.client, "post", slow_post)
        # The first round knows no pace: it starts all it claimed, posts what fits in its
        # window (started at 0, 3, 6 and 9 s) and withdraws the rest.
        assert dispatcher.send_due() == 4
        assert withdrawn_attempts(svc) == queued - 4
        assert dispatcher.post_seconds == 3.0
        # Paced: three POSTs a round (one sender, 10 s), fewer than the backlog.
        assert dispatcher.round_size(500) == 3
        sent = [dispatcher.send_due() for _ in range(4)]
        assert sent == [3, 3, 2, 0]
        assert withdrawn_attempts(svc) == queued - 4, "a paced round withdrew a started attempt"
        posts = posts_by_message(receiver)
        assert len(posts) == queued and set(posts.values()) == {1}
        assert {(r.status, r.attempts) for r in delivery_rows(svc)} == {("succeeded", 1)}


# The sender's pacing is the same on both databases: its rounds are what is tested.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("jump", [-5.0, 3.0e8], ids=["backwards", "a-decade"])
def test_a_latency_no_post_can_take_does_not_pace_the_rounds(
    settings: Settings,
    clock: Clock,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    jump: float,
) -> None:
    """A clock that jumps between a POST's two readings (a test's frozen clock read by
    one of them and not the other, as freezegun does in a sender's thread) gives a
    latency below nothing or above the lease: it is no measure of the receiver, and
    taken as one it sized every later round at one POST each."""
    stopwatched = stopwatch_service(settings, clock, receiver, monkeypatch, users=3)
    with stopwatched as (svc, watch, queued):
        dispatcher = svc.dispatcher
        dispatcher.senders = 1
        post = dispatcher.client.post
        jumped: list[float] = []

        def jumping_post(*args: Any, **kwargs: Any) -> Any:
            answer = post(*args, **kwargs)
            if not jumped:  # the first POST's end reads the jumped clock
                watch.advance(jump)
                jumped.append(jump)
                return answer
            watch.advance(0.5)
            return answer

        monkeypatch.setattr(dispatcher.client, "post", jumping_post)
        if jump > 0:
            # Past the round's window: the first POST alone is sent, the rest withdrawn.
            assert dispatcher.send_due() == 1
        else:
            assert dispatcher.send_due() == queued
        assert dispatcher.post_seconds == (None if jump > 0 else 0.5)
        while dispatcher.send_due():
            pass
        assert dispatcher.post_seconds == 0.5
        # Paced by the true half second a POST: (lease / 2 - timeout) / 0.5 a round.
        window = (settings.webhook_lease / 2 - settings.webhook_timeout).total_seconds()
        assert dispatcher.per_sender() == int(window / 0.5)
        posts = posts_by_message(receiver)
        assert len(posts) == queued and set(posts.values()) == {1}


# The sender's pacing is the same on both databases: its rounds are what is tested.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_rounds_whose_starts_outlast_their_window_shrink_until_they_post(
    settings: Settings, clock: Clock, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a database so loaded that recording a round's starts takes longer than the
    round may post for, every attempt of the round is withdrawn unposted: claiming as
    many again each round would never post anything (the livelock seen under ten kills).
    The next rounds claim half, until their starts leave time to post; then all is sent.
    The load is the dispatcher's stopwatch moved on, not sleeps: the database's real
    time, on a loaded machine, must not decide which round posts."""
    # A round may post for lease / 2 - timeout = 10 s.
    paced = settings.model_copy(
        update={"webhook_lease": timedelta(seconds=40), "webhook_timeout": timedelta(seconds=10)}
    )
    stopwatched = stopwatch_service(paced, clock, receiver, monkeypatch, users=4)
    with stopwatched as (svc, watch, queued):
        dispatcher = svc.dispatcher
        recorded = dispatcher.start

        def loaded_start(*args: Any, **kwargs: Any) -> dict[UUID, int]:
            rows = args[1] if len(args) > 1 else kwargs["rows"]
            watch.advance(2.0 * len(rows))  # a round's window is 10 s
            return recorded(*args, **kwargs)

        monkeypatch.setattr(dispatcher, "start", loaded_start)
        assert dispatcher.send_due() == 0  # all withdrawn: the starts took 16 s
        assert withdrawn_attempts(svc) == queued
        assert dispatcher.round_size(500) == queued // 2
        for _ in range(6):
            if not dispatcher.send_due():
                break
        posts = posts_by_message(receiver)
        assert len(posts) == queued and set(posts.values()) == {1}
        assert {(r.status, r.attempts) for r in delivery_rows(svc)} == {("succeeded", 1)}
