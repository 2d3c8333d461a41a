"""Event destinations publishing into real brokers (issue 35): a RabbitMQ node and a NATS
JetStream server of the tests' own (tests/brokers.py), on SQLite and PostgreSQL.

What a consumer reads: the webhooks' envelope and body, the keyed message id (AMQP
`message_id`, JetStream's `Nats-Msg-Id`), routed by the longest matching prefix, each
user's messages in the order of the log. Then: the broker killed mid-stream and started
again, the service restarted mid-stream, two services publishing at once, a secret
rotation, an erased user's messages skipped (counted in the rounds, only `user.erased`
published), a destination failing for 5 days disabled, and the test-send route.

A destination follows the log by a cursor (ADR 0055): no record per message. What the
broker is to hold comes from a witness instead, a webhook endpoint of the same team
environment that takes every type: the outbox records it the same messages (ids, types,
users, log positions, bodies), by other code than the publisher's. How they went out is
read from the destination's rounds (`PublishRound`) and its cursor's row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import nats
import pika
import pytest
import standardwebhooks
from fastapi.testclient import TestClient
from healthledger.adapters.brokers.clients import BrokerClient, Message, Published
from healthledger.adapters.brokers.publisher import EventPublisher, connect
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.compliance.report_rendering import render_html
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.persistence.engine.schema import (
    event_destination_cursors,
    event_destinations,
    stored_events,
    webhook_deliveries,
)
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.settings import Settings
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import PENDING, SUCCEEDED
from healthledger.domain.webhooks.event_destination_management import BrokerTarget
from healthledger.domain.webhooks.event_destinations import (
    FAILING_TOO_LONG,
    NATS,
    RABBITMQ,
    EventDestination,
    Route,
    route_for,
)
from healthledger.domain.webhooks.publish_rounds import (
    PublishRound,
    round_id_of,
    tracking_name_of,
)
from sqlalchemy import select

from tests.brokers import NATS_SERVER, RABBITMQ_SERVER, NatsServer, RabbitNode, free_port, need
from tests.clocks import Clock
from tests.delivery_rows import with_types
from tests.e2e.webhook_team import endpoint, the_team
from tests.receivers import Receiver, http_receiver
from tests.recorded import logged_events

CTX = CommandContext(actor="test:actor", request_id="req-destinations")
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EXCHANGE = "health-events"
STREAM = "HEALTH"
# Overlapping prefixes: a deletion's undo goes to its own key, every other user.* type to
# the first; provider.connection.* to a third.
ROUTES = [
    Route("user.", "hl.users"),
    Route("user.deletion_undone", "hl.undone"),
    Route("provider.connection.", "hl.connections"),
]
QUEUES = {"hl.users": "q-users", "hl.undone": "q-undone", "hl.connections": "q-connections"}


# -- the brokers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitNode]:
    need(RABBITMQ_SERVER)
    node = RabbitNode(tmp_path_factory.mktemp("rabbitmq"))
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    need(NATS_SERVER)
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


class Consumer:
    """What a team's consumer reads from its broker: (routing key or subject, message id,
    event type, body) in the broker's order."""

    kind: str
    port: int

    def prepare(self) -> None: ...

    def read(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        raise NotImplementedError

    def count(self) -> int:
        """How many messages the broker holds (reading none)."""
        raise NotImplementedError


class RabbitConsumer(Consumer):
    kind = RABBITMQ

    def __init__(self, node: RabbitNode) -> None:
        self.node = node
        self.port = node.port

    def _channel(self) -> tuple[Any, Any]:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        return connection, connection.channel()

    def prepare(self) -> None:
        connection, channel = self._channel()
        channel.exchange_declare(EXCHANGE, "direct", durable=True)
        for key, queue in QUEUES.items():
            channel.queue_declare(queue, durable=True)
            channel.queue_purge(queue)
            channel.queue_bind(queue, EXCHANGE, key)
        connection.close()

    def count(self) -> int:
        connection, channel = self._channel()
        total = sum(
            channel.queue_declare(queue, passive=True).method.message_count
            for queue in QUEUES.values()
        )
        connection.close()
        return total

    def read(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        # Each queue in its own order; a user's messages are all on... several queues, so
        # the order is checked per queue (and the log order per user within it).
        connection, channel = self._channel()
        found = []
        for queue in QUEUES.values():
            while True:
                method, properties, body = channel.basic_get(queue, auto_ack=True)
                if method is None:
                    break
                found.append(
                    (method.routing_key, properties.message_id, properties.type, json.loads(body))
                )
        connection.close()
        return found


class NatsConsumer(Consumer):
    kind = NATS

    def __init__(self, server: NatsServer) -> None:
        self.port = server.port

    def prepare(self) -> None:
        async def prepare() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{self.port}")
            js = nc.jetstream()
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(STREAM)
            await js.add_stream(name=STREAM, subjects=["hl.>"])
            await nc.close()

        asyncio.run(prepare())

    def count(self) -> int:
        async def count() -> int:
            nc = await nats.connect(f"nats://127.0.0.1:{self.port}")
            info = await nc.jetstream().stream_info(STREAM)
            await nc.close()
            return int(info.state.messages)

        return asyncio.run(count())

    def read(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        async def read() -> list[tuple[str, str, str, dict[str, Any]]]:
            nc = await nats.connect(f"nats://127.0.0.1:{self.port}")
            js = nc.jetstream()
            info = await js.stream_info(STREAM)
            found = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                if info.state.messages == 0:
                    break
                msg = await js.get_msg(STREAM, seq)
                headers = msg.headers or {}
                found.append(
                    (
                        str(msg.subject),
                        headers["Nats-Msg-Id"],
                        headers["Healthledger-Event-Type"],
                        json.loads(msg.data or b"{}"),
                    )
                )
            await nc.close()
            return found

        return asyncio.run(read())


@pytest.fixture(params=[RABBITMQ, NATS])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    if request.param == RABBITMQ:
        consumer: Consumer = RabbitConsumer(request.getfixturevalue("rabbit"))
    else:
        consumer = NatsConsumer(request.getfixturevalue("nats_server"))
    consumer.prepare()
    return consumer


def connection_of(broker: Consumer, **extra: Any) -> dict[str, Any]:
    if broker.kind == RABBITMQ:
        return {"host": "127.0.0.1", "port": broker.port, "exchange": EXCHANGE, **extra}
    return {"host": "127.0.0.1", "port": broker.port, "stream": STREAM, **extra}


# -- the service ------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def dest_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"webhook_lease": timedelta(seconds=40), "webhook_timeout": timedelta(seconds=5)}
    )


@pytest.fixture
def svc(dest_settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(dest_settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


def destination(svc: Service, broker: Consumer, **fields: Any) -> UUID:
    made = svc.event_destinations.create(
        CTX,
        the_team(svc),
        "sandbox",
        kind=broker.kind,
        connection=fields.pop("connection", None) or connection_of(broker),
        routes=fields.pop("routes", ROUTES),
        **fields,
    )
    return made.id


def churn(svc: Service, user_id: UUID, times: int) -> None:
    """A user deleted and restored `times` times: user.deleted then user.deletion_undone,
    each its own logged event, so the order of a user's messages is known."""
    team = the_team(svc)
    for _ in range(times):
        svc.users.delete_user(CTX, team, user_id)
        svc.users.undo_deletion(CTX, team, user_id)


def users(svc: Service, count: int, prefix: str = "u") -> list[UUID]:
    team = the_team(svc)
    return [
        svc.users.create_user(CTX, team, client_user_id=f"{prefix}-{i}").id for i in range(count)
    ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver that answers 200: the witness endpoint's (`witness`)."""
    with http_receiver() as found:
        yield found


def witness(svc: Service, receiver: Receiver) -> UUID:
    """A webhook endpoint of the destinations' team environment that takes every type.
    The webhooks carry the same messages as the brokers (ids, types, users, bodies), and
    the outbox records one delivery each, by other code than the publisher's: what the
    broker is to hold is read from them (`expected`)."""
    return endpoint(svc, receiver.url("witness"))[0]


def created_at(svc: Service, destination_id: UUID) -> int:
    """The log position of the destination's creation: it publishes what comes after."""
    e = stored_events.c
    with svc.db.read() as conn:
        return int(
            conn.execute(
                select(e.notification_id).where(
                    e.originator_id == destination_id, e.originator_version == 1
                )
            ).scalar_one()
        )


def expected(svc: Service, witness_id: UUID, destination_id: UUID) -> list[Any]:
    """The messages the destination is to publish, in the order of the log: the witness's
    deliveries about users (a team-level type never goes to a broker), of a type the
    destination's routes take, announced after its creation. Each was delivered (the
    witness answers 200), so none is missing."""
    d = webhook_deliveries.c
    with svc.db.read() as conn:
        found = with_types(
            svc,
            conn.execute(
                select(webhook_deliveries)
                .where(d.endpoint_id == witness_id)
                .order_by(d.log_position, d.message_id)
            ).all(),
        )
    start = created_at(svc, destination_id)
    taken = [
        r
        for r in found
        if r.user_id is not None
        and r.log_position > start
        and r.event_type is not None
        and route_for(ROUTES, r.event_type) is not None
    ]
    assert taken, "the witness was told something"
    assert {r.status for r in taken} == {SUCCEEDED}
    return taken


def position(svc: Service, destination_id: UUID) -> int:
    """Where the destination's cursor is in the log."""
    return DestinationLeases(svc.db).position(destination_id, tracking_name_of(destination_id))


def cursor_of(svc: Service, destination_id: UUID) -> Any:
    """The destination's row of `event_destination_cursors`."""
    found = DestinationLeases(svc.db).cursor(destination_id)
    assert found is not None
    return found


def rounds(svc: Service, destination_id: UUID) -> list[list[Audited.Event]]:
    """Each of the destination's publish rounds, in number order: its Started, then its
    Finished unless the round is open (its process died before recording it)."""
    return [
        logged_events(svc.ledger, round_id_of(destination_id, number))
        for number in range(1, cursor_of(svc, destination_id).rounds + 1)
    ]


def finished(svc: Service, destination_id: UUID) -> list[PublishRound.Finished]:
    """The rounds' outcomes (of the finished ones)."""
    return [
        e
        for events in rounds(svc, destination_id)
        for e in events
        if isinstance(e, PublishRound.Finished)
    ]


def caught_up(svc: Service) -> bool:
    """Every live destination's cursor is at the log's end with no failure outstanding,
    and no webhook delivery is pending."""
    d = webhook_deliveries.c
    c = event_destination_cursors.c
    dest = event_destinations.c
    last = svc.dispatcher.recorder.max_notification_id() or 0
    with svc.db.read() as conn:
        if conn.execute(select(d.delivery_id).where(d.status == PENDING)).first() is not None:
            return False
        cursors = conn.execute(
            select(c.destination_id, c.attempts)
            .join(event_destinations, dest.destination_id == c.destination_id)
            .where(dest.paused_reason.is_(None), dest.deleted_at.is_(None))
        ).all()
    return all(row.attempts == 0 and position(svc, row.destination_id) >= last for row in cursors)


def settle(svc: Service, clock: Clock, tries: int = 40) -> None:
    """Dispatch until every destination's cursor has caught up with the log and no
    webhook delivery is pending, moving the clock past each retry's delay."""
    for _ in range(tries):
        svc.jobs.dispatch_webhooks()
        if caught_up(svc):
            return
        clock.advance(timedelta(hours=11))
    raise AssertionError("destinations or deliveries still behind")


def check_stream(
    svc: Service, expected: Sequence[Any], received: Sequence[tuple[str, str, str, dict[str, Any]]]
) -> None:
    """Every expected message reached the broker (copies only of the same message id, as
    at least once allows), routed by the longest prefix, with the webhook's body, and each
    user's messages on one routing key in the order of the log."""
    by_id = {r.message_id: r for r in expected}
    assert len(by_id) == len(expected)
    assert {m[1] for m in received} == set(by_id)
    routes = list(ROUTES)
    per_key_user: dict[tuple[str, str], list[int]] = defaultdict(list)
    seen: set[str] = set()
    for key, message_id, event_type, body in received:
        row = by_id[message_id]
        assert event_type == row.event_type == body["event_type"]
        assert (
            key
            == max(
                (r for r in routes if event_type.startswith(r.prefix)), key=lambda r: len(r.prefix)
            ).target
        )
        assert body["user_id"] == str(row.user_id)
        assert body["team_id"] == str(row.team_id)
        built = svc.dispatcher.payloads.of_delivery(row, row.event_type)
        assert built is not None and json.loads(built) == body
        if message_id not in seen:  # a copy published again is where it was first
            per_key_user[(key, body["user_id"])].append(row.log_position)
            seen.add(message_id)
    for positions in per_key_user.values():
        assert positions == sorted(positions)


# -- the tests ---------------------------------------------------------------------------


def test_a_consumer_reads_the_webhook_messages_routed_by_the_longest_prefix(
    svc: Service, clock: Clock, broker: Consumer, receiver: Receiver
) -> None:
    destination_id = destination(svc, broker)
    witness_id = witness(svc, receiver)
    people = users(svc, 3)
    for person in people:
        churn(svc, person, 3)
    settle(svc, clock)
    received = broker.read()
    assert len(received) == 3 * 6
    assert {m[0] for m in received} == {"hl.users", "hl.undone"}
    check_stream(svc, expected(svc, witness_id, destination_id), received)
    # The message ids are the webhooks' keyed ids (msg_ + 32 hex), one per event.
    assert all(m[1].startswith("msg_") and len(m[1]) == 36 for m in received)
    # The rounds say so: every message published once, each user's six, none failed.
    outcomes = finished(svc, destination_id)
    assert sum(f.published for f in outcomes) == 3 * 6
    assert {f.error for f in outcomes} == {None}
    per_user: dict[str, int] = defaultdict(int)
    for outcome in outcomes:
        for user_id, count in outcome.users.items():
            per_user[user_id] += count
    assert per_user == {str(person): 6 for person in people}
    # Caught up: nothing more to publish (the cursor is at the log's end).
    assert svc.jobs.dispatch_webhooks() == 0
    assert len(finished(svc, destination_id)) == len(outcomes)


def test_the_broker_killed_mid_stream_and_started_again_loses_and_reorders_nothing(
    svc: Service,
    clock: Clock,
    broker: Consumer,
    receiver: Receiver,
    request: pytest.FixtureRequest,
) -> None:
    process = request.getfixturevalue("rabbit" if broker.kind == RABBITMQ else "nats_server")
    destination_id = destination(svc, broker)
    witness_id = witness(svc, receiver)
    people = users(svc, 10)
    for person in people:
        churn(svc, person, 10)
    # The broker is SIGKILLed in the middle of the publisher's round: after 20 messages
    # were acknowledged, before the rest (published to a dead broker: they fail).
    killer = KilledAfter(20, process)
    svc.publisher.connector = killer.connector
    svc.jobs.dispatch_webhooks()
    svc.publisher.connector = connect
    assert killer.killed
    for person in people:  # more while the broker is down
        churn(svc, person, 2)
    svc.jobs.dispatch_webhooks()
    queued = expected(svc, witness_id, destination_id)
    assert len(queued) == 10 * 24
    published = sum(f.published for f in finished(svc, destination_id))
    assert 20 <= published < len(queued), "killed mid-stream"
    # The broker was down: the cursor waits before the first message not acknowledged,
    # failing since the kill, its retry on the schedule.
    assert position(svc, destination_id) < queued[-1].log_position
    failing = cursor_of(svc, destination_id)
    assert failing.attempts >= 1 and failing.failing_since is not None
    assert failing.last_error is not None
    process.start()
    settle(svc, clock)
    received = broker.read()
    check_stream(svc, queued, received)
    assert len({m[1] for m in received}) == 10 * 24
    if broker.kind == NATS:
        assert len(received) == 10 * 24  # once per id: nothing acknowledged went again
    # Each message acknowledged once, over the rounds.
    assert sum(f.published for f in finished(svc, destination_id)) == 10 * 24
    assert cursor_of(svc, destination_id).failing_since is None


class KilledAfter:
    """A broker client whose broker is killed after `count` messages of its first round
    were acknowledged; the rest of the round is published to the dead broker."""

    def __init__(self, count: int, process: Any) -> None:
        self.count = count
        self.process = process
        self.killed = False

    def connector(self, target: BrokerTarget, connect_to: str, timeout: float) -> BrokerClient:
        real = connect(target, connect_to, timeout)
        outer = self

        class Client:
            def publish(self, messages: Sequence[Message], deadline: float) -> Published:
                if outer.killed:
                    return real.publish(messages, deadline)
                first = real.publish(messages[: outer.count], deadline)
                outer.process.kill()
                outer.killed = True
                return first + real.publish(messages[outer.count :], deadline)

            def close(self) -> None:
                real.close()

        return Client()


class DiesAfter:
    """A broker client that acknowledges `count` messages and then 'dies' before the
    service records them (the round is cut there: its process is gone)."""

    class Died(BaseException):
        pass

    def __init__(self, count: int) -> None:
        self.count = count

    def connector(self, target: BrokerTarget, connect_to: str, timeout: float) -> BrokerClient:
        real = connect(target, connect_to, timeout)
        outer = self

        class Client:
            def publish(self, messages: Sequence[Message], deadline: float) -> Published:
                published = real.publish(messages[: outer.count], deadline)
                assert all(o is not None and o.failure is None for o in published)
                raise DiesAfter.Died()

            def close(self) -> None:
                real.close()

        return Client()


def test_the_service_restarted_mid_stream_publishes_the_rest_under_the_same_ids(
    dest_settings: Settings, clock: Clock, broker: Consumer, receiver: Receiver
) -> None:
    first = build_service(dest_settings, clock=clock)
    first.bootstrap()
    destination_id = destination(first, broker)
    witness_id = witness(first, receiver)
    people = users(first, 3)
    for person in people:
        churn(first, person, 4)
    dying = DiesAfter(7)
    first.dispatcher.follow()
    publisher = EventPublisher(
        first.dispatcher,
        first.event_destinations,
        DestinationLeases(first.db),
        clock,
        timeout=timedelta(seconds=5),
        lease=timedelta(seconds=40),
        connector=dying.connector,
    )
    with pytest.raises(DiesAfter.Died):
        publisher.publish_due()
    first.close()
    # The lease of the dead process passes; a new process takes over.
    clock.advance(timedelta(minutes=5))
    second = build_service(dest_settings, clock=clock)
    try:
        settle(second, clock)
        received = broker.read()
        check_stream(second, expected(second, witness_id, destination_id), received)
        ids = [m[1] for m in received]
        assert len(set(ids)) == 3 * 8
        if broker.kind == NATS:
            assert len(ids) == 3 * 8  # JetStream dropped the 7 published again
        else:
            assert len(ids) == 3 * 8 + 7  # AMQP delivers them twice, same ids
        # The dead process's round stays started, its outcome unknown (possibly
        # published: 7 were); the new process's round publishes the same stretch again.
        dead, *later = rounds(second, destination_id)
        (started,) = dead
        assert isinstance(started, PublishRound.Started)
        assert started.users == {str(person): 8 for person in people}
        assert later, "published again by a round of the new process"
        again = later[0][0]
        assert isinstance(again, PublishRound.Started)
        assert again.after == started.after and again.upto >= started.upto
        assert again.users == started.users
        outcomes = finished(second, destination_id)
        assert len(outcomes) == len(later)
        assert sum(f.published for f in outcomes) == 3 * 8
        assert {f.error for f in outcomes} == {None}
    finally:
        second.close()


def test_two_services_publish_each_message_once(
    dest_settings: Settings, clock: Clock, broker: Consumer, receiver: Receiver
) -> None:
    one = build_service(dest_settings, clock=clock)
    one.bootstrap()
    two = build_service(dest_settings, clock=clock)
    try:
        destination_id = destination(one, broker)
        witness_id = witness(one, receiver)
        people = users(one, 6)
        for person in people:
            churn(one, person, 5)
        errors: list[BaseException] = []

        def run(service: Service) -> None:
            try:
                for _ in range(20):
                    service.jobs.dispatch_webhooks()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in (one, two, one, two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert errors == []
        settle(one, clock)
        received = broker.read()
        check_stream(one, expected(one, witness_id, destination_id), received)
        assert len(received) == len({m[1] for m in received}) == 6 * 10
        # One publisher at a time: every round finished, and each message was published
        # by one round only.
        assert all(len(events) == 2 for events in rounds(one, destination_id))
        outcomes = finished(one, destination_id)
        assert sum(f.published for f in outcomes) == 6 * 10
        assert {f.error for f in outcomes} == {None}
    finally:
        one.close()
        two.close()


def test_an_erased_users_queued_messages_are_dropped(
    svc: Service, clock: Clock, broker: Consumer
) -> None:
    """Paused, the destination publishes nothing while the user is erased; resumed, its
    cursor meets the user's messages with no body to build: skipped and counted in the
    rounds, and only `user.erased` (nothing personal) reaches the broker."""
    destination_id = destination(svc, broker)
    team = the_team(svc)
    kept, erased = users(svc, 2)
    svc.event_destinations.set_paused(CTX, team, "sandbox", destination_id, True)
    churn(svc, kept, 1)
    churn(svc, erased, 2)
    svc.users.delete_user(CTX, team, erased)
    clock.advance(timedelta(days=8))
    svc.jobs.dispatch_webhooks()  # held while paused: the cursor waits
    assert broker.count() == 0
    assert rounds(svc, destination_id) == []
    assert position(svc, destination_id) == created_at(svc, destination_id)
    assert svc.users.erase_user(CTX, erased)
    svc.event_destinations.set_paused(CTX, team, "sandbox", destination_id, False)
    settle(svc, clock)
    received = broker.read()
    about_erased = [m[2] for m in received if m[3]["user_id"] == str(erased)]
    assert about_erased == ["user.erased"]
    assert [m[2] for m in received if m[3]["user_id"] == str(kept)] == [
        "user.deleted",
        "user.deletion_undone",
    ]
    # The erased user's 2 x (deleted, restored) and deleted: skipped, counted.
    outcomes = finished(svc, destination_id)
    assert sum(f.skipped_erased for f in outcomes) == 5
    assert sum(f.published for f in outcomes) == 3
    assert {f.error for f in outcomes} == {None}


def test_a_destination_failing_for_5_days_is_disabled_and_keeps_its_messages(
    svc: Service, clock: Clock, broker: Consumer
) -> None:
    closed = free_port()  # nothing listens there
    destination_id = destination(svc, broker, connection={**connection_of(broker), "port": closed})
    with http_receiver() as receiver:
        # The team's admins: one endpoint takes every type, one only this team-level one,
        # one only user.* (not told); another environment's endpoint is not told either.
        every, every_secret = endpoint(svc, receiver.url("every"))
        endpoint(svc, receiver.url("told"), filter_types=["event_destination.*"])
        endpoint(svc, receiver.url("users"), filter_types=["user.*"])
        svc.webhooks.create(CTX, the_team(svc), "production", url=receiver.url("production"))
        person = users(svc, 1)[0]
        churn(svc, person, 1)
        for _ in range(14):
            svc.jobs.dispatch_webhooks()
            clock.advance(timedelta(hours=10))
        # Once disabled, later rounds tell nobody again.
        for _ in range(3):
            svc.jobs.dispatch_webhooks()
        told = [json.loads(r.body) for r in receiver.received if b"event_destination" in r.body]
        signed = [r for r in receiver.on("every") if b"event_destination" in r.body]
    found = svc.ledger.find(destination_id)
    assert isinstance(found, EventDestination)
    assert found.paused_reason == FAILING_TOO_LONG
    disabled = [
        e
        for e in logged_events(svc.ledger, destination_id)
        if isinstance(e, EventDestination.Disabled | EventDestination.Paused)
    ]
    assert [(type(e), e.reason, e.actor) for e in disabled] == [
        (EventDestination.Disabled, FAILING_TOO_LONG, "system:scheduler")
    ]
    (event,) = disabled
    assert isinstance(event, EventDestination.Disabled)
    assert event.timestamp - event.failing_since >= timedelta(days=5)
    assert event.error == "connection_error"
    # The team-level webhook, once to each sandbox endpoint that takes it, signed.
    assert [m["event_type"] for m in told] == ["event_destination.disabled"] * 2
    assert told[0] == told[1]
    assert {k: told[0][k] for k in ("user_id", "client_user_id", "team_id")} == {
        "user_id": None,
        "client_user_id": None,
        "team_id": str(the_team(svc)),
    }
    assert told[0]["data"] == {
        "destination_id": str(destination_id),
        "team_id": str(the_team(svc)),
        "environment": "sandbox",
        "kind": broker.kind,
        "reason": FAILING_TOO_LONG,
        "failing_since": event.failing_since.isoformat(),
        "disabled_at": event.timestamp.isoformat(),
        "last_error": "connection_error",
    }
    (message,) = signed
    standardwebhooks.Webhook(every_secret).verify(
        message.body, {k: v for k, v in message.headers.items() if k.startswith("webhook-")}
    )
    with svc.db.read() as conn:
        team_level = conn.execute(
            select(webhook_deliveries).where(webhook_deliveries.c.user_id.is_(None))
        ).all()
    assert len(team_level) == 2 and {r.status for r in team_level} == {SUCCEEDED}
    assert every in {r.endpoint_id for r in team_level}
    # Its messages kept, not given up: the cursor has not moved since the creation, each
    # round failed with nothing published, and its row says since when.
    assert position(svc, destination_id) == created_at(svc, destination_id)
    outcomes = finished(svc, destination_id)
    assert len(outcomes) >= 2
    assert {(f.published, f.error) for f in outcomes} == {(0, "connection_error")}
    failing = cursor_of(svc, destination_id)
    assert failing.failing_since == event.failing_since
    assert failing.attempts == len(outcomes)
    # Pointed at the broker again and resumed: everything goes out, in order.
    svc.event_destinations.update(
        CTX, the_team(svc), "sandbox", destination_id, {"connection": connection_of(broker)}
    )
    svc.event_destinations.set_paused(CTX, the_team(svc), "sandbox", destination_id, False)
    # Due at once on the resume, not at their next retry (up to 10 h away). The "every"
    # endpoint was told the same messages.
    svc.jobs.dispatch_webhooks()
    check_stream(svc, expected(svc, every, destination_id), broker.read())
    assert cursor_of(svc, destination_id).failing_since is None


NATS_USERS = """
authorization {{
  users: [
    {{user: "{user}", password: "{password}"}}
    {{user: reader, password: reader}}
  ]
}}
# The tests' consumer connects without credentials, as the reader.
no_auth_user: reader
"""


def test_a_secret_rotated_while_messages_flow_loses_and_reorders_nothing(
    svc: Service,
    clock: Clock,
    broker: Consumer,
    receiver: Receiver,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The broker's password is changed while messages flow (RabbitMQ: rabbitmqctl
    change_password on the test's node, its connections closed; NATS: the server started
    again with the user's new password), then the destination's secret: the messages
    published meanwhile are refused and retried, nothing is lost or reordered per user,
    and once rotated the old secret is used no more."""
    user = f"hl-{uuid4().hex[:8]}"
    if broker.kind == RABBITMQ:
        node: RabbitNode = request.getfixturevalue("rabbit")
        node.ctl("add_user", user, "old-secret")
        node.ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")

        def rotate(password: str) -> None:
            node.ctl("change_password", user, password)
            node.ctl("close_all_connections", "password rotated")

        consumer: Consumer = broker
    else:
        server = NatsServer(
            tmp_path_factory.mktemp("nats-users"),
            NATS_USERS.format(user=user, password="old-secret"),
        )
        server.start()
        request.addfinalizer(server.stop)

        def rotate(password: str) -> None:
            server.kill()
            server.config = NATS_USERS.format(user=user, password=password)
            server.start()

        consumer = NatsConsumer(server)
        consumer.prepare()
    destination_id = destination(
        svc, consumer, connection=connection_of(consumer, username=user), secret="old-secret"
    )
    witness_id = witness(svc, receiver)
    team = the_team(svc)
    people = users(svc, 4, "rot")
    for person in people:
        churn(svc, person, 2)
    svc.jobs.dispatch_webhooks()
    assert consumer.count() == 16  # flowing with the old secret
    rotate("new-secret")  # the broker first, as the docs say
    for person in people:
        churn(svc, person, 1)
    for _ in range(3):  # refused (the old secret), retried on the schedule
        svc.jobs.dispatch_webhooks()
        clock.advance(timedelta(seconds=6))
    assert consumer.count() == 16
    svc.event_destinations.update(CTX, team, "sandbox", destination_id, {"secret": "new-secret"})
    rotated_at = clock()
    target = svc.event_destinations.target(destination_id)
    assert target is not None and target.secret == "new-secret"
    for person in people:
        churn(svc, person, 1)
    settle(svc, clock)
    received = consumer.read()
    check_stream(svc, expected(svc, witness_id, destination_id), received)
    assert len(received) == len({m[1] for m in received}) == 4 * 8
    outcomes = finished(svc, destination_id)
    refused = [f for f in outcomes if f.error is not None]
    assert "authentication_failed" in {f.error for f in refused}
    assert all(f.timestamp < rotated_at and f.published == 0 for f in refused)
    # Once rotated: the 8 refused and the 8 after, each published once.
    assert sum(f.published for f in outcomes if f.timestamp >= rotated_at) == 16
    assert sum(f.published for f in outcomes) == 4 * 8


def test_test_send_publishes_one_message_and_says_why_not(
    dest_settings: Settings, clock: Clock, broker: Consumer
) -> None:
    svc = build_service(dest_settings, clock=clock)
    boot = svc.bootstrap()
    assert boot is not None
    destination_id = destination(svc, broker)
    base = f"/v1/org/{boot.org_id}/team/{boot.team_id}/sandbox/event_destination/{destination_id}"
    headers = {"X-Management-Key": boot.management_key.plain}
    try:
        with TestClient(create_management_api(svc), raise_server_exceptions=False) as api:
            sent = api.post(
                f"{base}/test", json={"event_type": "user.deletion_undone"}, headers=headers
            )
            assert sent.status_code == 200, sent.text
            answer = sent.json()
            assert (answer["success"], answer["target"], answer["error"]) == (
                True,
                "hl.undone",
                None,
            )
            received = broker.read()
            assert [(m[0], m[1], m[2]) for m in received] == [
                ("hl.undone", answer["message_id"], "event_destination.test")
            ]
            no_route = api.post(
                f"{base}/test", json={"event_type": "labtest.order.created"}, headers=headers
            )
            assert no_route.status_code == 422
            svc.event_destinations.update(
                CTX, boot.team_id, "sandbox", destination_id, {"routes": [Route("user.", "nobody")]}
            )
            # No body: the first route (the body is optional).
            failed = api.post(f"{base}/test", headers=headers).json()
            assert failed["success"] is False
            assert failed["error"] == ("unroutable" if broker.kind == RABBITMQ else "no_stream")
    finally:
        svc.close()


def test_the_audit_and_the_deletion_report_list_the_destination_as_a_recipient(
    svc: Service, clock: Clock, broker: Consumer
) -> None:
    destination_id = destination(svc, broker)
    team = the_team(svc)
    person, other = users(svc, 2)
    churn(svc, person, 2)
    churn(svc, other, 1)
    settle(svc, clock)
    svc.users.delete_user(CTX, team, person)
    clock.advance(timedelta(days=8))
    assert svc.users.erase_user(CTX, person)
    settle(svc, clock)
    # The user's audit lists the destination's rounds that published about the user
    # (ADR 0055), each with the user's own count only (never another user's id).
    entries = [e for e in history(svc, person) if e.event.startswith("PublishRound.")]
    started = [e for e in entries if e.event == "PublishRound.Started"]
    finished = [e for e in entries if e.event == "PublishRound.Finished"]
    assert started and len(finished) == len(started)
    for entry in entries:
        assert entry.changes["destination_id"] == destination_id
        assert set(entry.changes["users"]) <= {str(person)}
    # 2 x (deleted, undone), then erased: the deletion's message found the user erased
    # when its round came (nothing to build it from), skipped and never published.
    assert sum(e.changes["users"][str(person)] for e in started) == 5
    assert sum(e.changes["users"].get(str(person), 0) for e in finished) == 5
    assert sum(e.changes["skipped_erased"] for e in finished) >= 1
    report = deletion_report(svc, person, CTX)
    assert verify_report(report) == []
    recipients = report["recipients"]
    assert recipients["webhook_endpoints"] == []
    [listed] = recipients["event_destinations"]["destinations"]
    assert listed["destination_id"] == str(destination_id)
    assert listed["kind"] == broker.kind
    assert listed["broker"] == f"{broker.kind}://127.0.0.1:{broker.port}"
    # Every publish acknowledged (user.erased's, published after the report's horizon of
    # the user's own events, may not be among them).
    assert 4 <= listed["deliveries"] <= 5
    assert listed["publishes"] == listed["acknowledged"] == listed["deliveries"]
    assert listed["outcome_unknown"] == 0
    assert listed["received"] is True
    html = render_html(report)
    assert str(destination_id) in html and "Event destination" in html


PUBLISHER = """
import sys, time
from pathlib import Path
from healthledger.adapters.composition import build_service
from healthledger.adapters.settings import Settings
from datetime import timedelta
service = build_service(Settings(
    database_url=sys.argv[1], master_key_file=Path(sys.argv[2]),
    webhook_lease=timedelta(seconds=40), webhook_timeout=timedelta(seconds=5),
))
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    service.jobs.dispatch_webhooks()
    time.sleep(0.01)
service.close()
"""


def test_two_service_processes_publish_each_message_once(
    dest_settings: Settings, clock: Clock, broker: Consumer, receiver: Receiver
) -> None:
    svc = build_service(dest_settings, clock=clock)
    svc.bootstrap()
    try:
        destination_id = destination(svc, broker)
        witness_id = witness(svc, receiver)
        for person in users(svc, 5, "proc"):
            churn(svc, person, 6)
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    PUBLISHER,
                    dest_settings.database_url,
                    str(dest_settings.master_key_file),
                    "8",
                ]
            )
            for _ in range(2)
        ]
        for process in processes:
            assert process.wait(timeout=120) == 0
        assert caught_up(svc), "the processes published everything"
        received = broker.read()
        check_stream(svc, expected(svc, witness_id, destination_id), received)
        assert len(received) == len({m[1] for m in received}) == 5 * 12
        # One process at a time per destination: every round finished, each message
        # published by one round only.
        assert all(len(events) == 2 for events in rounds(svc, destination_id))
        outcomes = finished(svc, destination_id)
        assert sum(f.published for f in outcomes) == 5 * 12
        assert {f.error for f in outcomes} == {None}
    finally:
        svc.close()
