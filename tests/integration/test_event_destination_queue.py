"""An event destination follows the log by a cursor of its own (ADR 0055). On both
databases, with a fake broker (a `connector` whose client acknowledges what it is given,
or fails a lane where a test says so), the publisher's rounds:

- one user's lane failing after other lanes' messages were acknowledged: the cursor stays
  before the first message not acknowledged, the next round publishes only what was not
  acknowledged, each user's in the order of the log, nothing twice;
- an erased user's messages are skipped and counted; only `user.erased` is published;
- a paused destination publishes nothing, and after its resume goes on from its cursor;
- a stretch of the log that holds nothing for a destination moves its tracking without a
  round recorded (nor a connection made);
- a failed round is retried on the webhook schedule, not before.

The expected messages come from the webhooks' outbox: an endpoint of the same team
environment that takes every type is given the same messages (ids, types, users, log
positions), computed by other code than the publisher's.

And the outbox itself reads each stream as its first event made it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.brokers.clients import (
    BrokerClient,
    Message,
    Outcome,
    Published,
    PublishFailed,
    lanes_of,
)
from healthledger.adapters.brokers.publisher import EventPublisher
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import webhook_deliveries
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.settings import Settings
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.event_destination_management import BrokerTarget
from healthledger.domain.webhooks.event_destinations import NATS, Route, route_for
from healthledger.domain.webhooks.publish_rounds import (
    PublishRound,
    round_id_of,
    tracking_name_of,
)
from sqlalchemy import select

from tests.clocks import Clock
from tests.conftest import Team
from tests.delivery_rows import with_types
from tests.recorded import logged_events

CTX = CommandContext(actor="test:actor", request_id="req-destination-queue")
ROUTES = [Route("user.", "health.users")]
# A loopback address the witness endpoint is never sent to here (the outbox only records).
WITNESS_URL = "http://127.0.0.1:9/witness"


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    """A service on the test's clock: a retry's schedule and an erasure's grace period
    pass when the test says so."""
    built = build_service(settings, clock=clock)
    yield built
    built.close()


class FakeBroker:
    """A broker client that acknowledges every message it is given, lane by lane as the
    real clients do (each lane in order, stopping at its first failure), except where told:
    `fail_next` (lane -> index in the lane) fails that message in the next publish only;
    `refuse` connections are refused before one is made. Keeps what it acknowledged, in
    order, and the destinations it connected to."""

    def __init__(self) -> None:
        self.acknowledged: list[Message] = []
        self.connected: list[UUID] = []
        self.fail_next: dict[str, int] = {}
        self.refuse = 0

    def connector(self, target: BrokerTarget, connect_to: str, timeout: float) -> BrokerClient:
        self.connected.append(target.destination_id)
        if self.refuse:
            self.refuse -= 1
            raise PublishFailed("connection_error", connection_lost=True)
        return self

    def publish(self, messages: Sequence[Message], deadline: float) -> Published:
        failing, self.fail_next = self.fail_next, {}
        outcomes: Published = [None] * len(messages)
        for lane in lanes_of(messages):
            for number, index in enumerate(lane):
                message = messages[index]
                if failing.get(message.lane) == number:
                    outcomes[index] = Outcome(0.1, PublishFailed("nacked"))
                    break
                self.acknowledged.append(message)
                outcomes[index] = Outcome(0.1)
        return outcomes

    def close(self) -> None:
        pass

    def ids(self) -> list[str]:
        return [m.message_id for m in self.acknowledged]


def publisher(svc: Service, clock: Clock, broker: FakeBroker) -> EventPublisher:
    return EventPublisher(
        svc.dispatcher,
        svc.event_destinations,
        DestinationLeases(svc.db),
        clock,
        connector=broker.connector,
    )


def destination(
    service: Service, team: Team, environment: str = "sandbox", routes: list[Route] | None = None
) -> UUID:
    """A NATS destination of every user's lifecycle type (a fake broker stands in for it)."""
    return service.event_destinations.create(
        CTX,
        team.team_id,
        environment,
        kind=NATS,
        connection={"host": "127.0.0.1", "port": 4222},
        routes=ROUTES if routes is None else routes,
    ).id


def witness(service: Service, team: Team) -> UUID:
    """A webhook endpoint of the team's sandbox taking every type: the outbox records it
    the messages the destination takes, by its own code."""
    return service.webhooks.create(CTX, team.team_id, "sandbox", url=WITNESS_URL).id


def churned(service: Service, team: Team, count: int, prefix: str = "queue") -> list[UUID]:
    """`count` users deleted and restored (two messages each, deleted then restored)."""
    people = []
    for number in range(count):
        user = service.users.create_user(CTX, team.team_id, client_user_id=f"{prefix}-{number}")
        service.users.delete_user(CTX, team.team_id, user.id)
        service.users.undo_deletion(CTX, team.team_id, user.id)
        people.append(user.id)
    return people


def churn(service: Service, team: Team, people: Sequence[UUID]) -> None:
    """Each of `people` deleted and restored once more, one after the other: their
    messages interleave in the log."""
    for user_id in people:
        service.users.delete_user(CTX, team.team_id, user_id)
        service.users.undo_deletion(CTX, team.team_id, user_id)


def rows(service: Service, endpoint_id: UUID) -> list[Any]:
    d = webhook_deliveries.c
    with service.db.read() as conn:
        return list(
            conn.execute(
                select(webhook_deliveries)
                .where(d.endpoint_id == endpoint_id)
                .order_by(d.log_position, d.message_id)
            ).all()
        )


def expected(service: Service, endpoint_id: UUID, after: int = 0) -> list[Any]:
    """The witness's deliveries (recorded by the outbox up to the log's end) of users'
    types the routes take, after log position `after`, in the order of the log."""
    while service.dispatcher.follow():
        pass
    return [
        r
        for r in with_types(service, rows(service, endpoint_id))
        if r.user_id is not None
        and r.log_position > after
        and route_for(ROUTES, r.event_type) is not None
    ]


def position(service: Service, destination_id: UUID) -> int:
    return DestinationLeases(service.db).position(destination_id, tracking_name_of(destination_id))


def rounds(service: Service, destination_id: UUID) -> list[list[Audited.Event]]:
    """Each round's events (Started, then Finished unless it is open), in number order."""
    cursor = DestinationLeases(service.db).cursor(destination_id)
    assert cursor is not None
    return [
        logged_events(service.ledger, round_id_of(destination_id, number))
        for number in range(1, cursor.rounds + 1)
    ]


def finished(service: Service, destination_id: UUID) -> list[PublishRound.Finished]:
    found = []
    for events in rounds(service, destination_id):
        assert isinstance(events[0], PublishRound.Started)
        assert len(events) == 2, "every round finished"
        assert isinstance(events[1], PublishRound.Finished)
        found.append(events[1])
    return found


def per_user(messages: Sequence[Message]) -> dict[str, list[str]]:
    lanes: dict[str, list[str]] = {}
    for message in messages:
        lanes.setdefault(message.lane, []).append(message.message_id)
    return lanes


def in_log_order(expected_rows: Sequence[Any]) -> dict[str, list[str]]:
    lanes: dict[str, list[str]] = {}
    for row in expected_rows:
        lanes.setdefault(str(row.user_id), []).append(row.message_id)
    return lanes


def test_a_round_failing_in_one_lane_is_resumed_with_only_what_was_not_acknowledged(
    svc: Service, home: Team, clock: Clock
) -> None:
    """Lanes run at once: the second user's lane fails at its second message while the
    others' are acknowledged, some of them after it in the log. The cursor stays before
    the failed message and the round names the ones acknowledged past it; the retry
    publishes the rest of that user's messages only, in order: nothing twice, nothing of
    a user overtaking an earlier one."""
    destination_id = destination(svc, home)
    witness_id = witness(svc, home)
    start = position(svc, destination_id)
    people = churned(svc, home, 3)
    churn(svc, home, people)  # two messages a user more, the users interleaved
    messages = expected(svc, witness_id, start)
    assert len(messages) == 3 * 4
    broker = FakeBroker()
    publishing = publisher(svc, clock, broker)
    second = str(people[1])
    broker.fail_next = {second: 1}
    publishing.publish_due()
    lanes = in_log_order(messages)
    failed_row = next(r for r in messages if r.message_id == lanes[second][1])
    acknowledged = set(broker.ids())
    assert acknowledged == {r.message_id for r in messages} - set(lanes[second][1:])
    (first,) = finished(svc, destination_id)
    assert (first.error, first.attempt, first.published) == ("nacked", 1, 9)
    assert first.cursor == failed_row.log_position - 1 == position(svc, destination_id)
    assert sorted(first.acknowledged_past) == sorted(
        r.message_id for r in messages if r.log_position > first.cursor and r.user_id != people[1]
    )
    assert first.users == {str(people[0]): 4, second: 1, str(people[2]): 4}
    # The first retry is at once: the next round publishes the second user's other three.
    broker.acknowledged.clear()
    publishing.publish_due()
    assert broker.ids() == lanes[second][1:]
    first, again = finished(svc, destination_id)
    assert (again.error, again.published, again.users) == (None, 3, {second: 3})
    assert again.acknowledged_past == []
    assert again.cursor == position(svc, destination_id) >= messages[-1].log_position
    assert publishing.publish_due() == 0
    assert broker.ids() == lanes[second][1:]


def test_an_erased_users_messages_are_skipped_and_counted_but_user_erased(
    svc: Service, home: Team, clock: Clock
) -> None:
    """The erasure drops nothing for a destination: its publisher finds no body to build
    for an erased user's messages, skips and counts them; `user.erased` (nothing
    personal) is published, and the kept user's messages in order."""
    destination_id = destination(svc, home)
    kept, erased = churned(svc, home, 2)
    svc.users.delete_user(CTX, home.team_id, erased)
    clock.advance(timedelta(days=8))  # past the grace period
    assert svc.users.erase_user(CTX, erased)
    broker = FakeBroker()
    assert publisher(svc, clock, broker).publish_due() == 3 + 3
    lanes: dict[str, list[str]] = {}
    for message in broker.acknowledged:
        lanes.setdefault(message.lane, []).append(message.event_type)
    assert lanes == {
        str(kept): ["user.deleted", "user.deletion_undone"],
        str(erased): ["user.erased"],
    }
    (round_,) = finished(svc, destination_id)
    # deleted, restored and deleted again: three skipped.
    assert (round_.published, round_.skipped_erased, round_.error) == (3, 3, None)
    assert round_.users == {str(kept): 2, str(erased): 1}


def test_a_paused_destination_publishes_nothing_and_resumes_from_its_cursor(
    svc: Service, home: Team, clock: Clock
) -> None:
    """A pause keeps the cursor where it is: what is announced meanwhile waits, and after
    the resume the destination publishes it, and nothing it had published before."""
    destination_id = destination(svc, home)
    witness_id = witness(svc, home)
    start = position(svc, destination_id)
    people = churned(svc, home, 2)
    broker = FakeBroker()
    publishing = publisher(svc, clock, broker)
    publishing.publish_due()
    before = expected(svc, witness_id, start)
    assert broker.ids() == [r.message_id for r in before]  # one lane after the other
    svc.event_destinations.set_paused(CTX, home.team_id, "sandbox", destination_id, True)
    paused_at = position(svc, destination_id)
    churn(svc, home, people)
    assert publishing.publish_due() == 0
    assert len(broker.acknowledged) == 4
    assert position(svc, destination_id) == paused_at
    assert len(rounds(svc, destination_id)) == 1
    svc.event_destinations.set_paused(CTX, home.team_id, "sandbox", destination_id, False)
    assert publishing.publish_due() == 4
    later = [r for r in expected(svc, witness_id, start) if r.log_position > paused_at]
    assert len(later) == 4
    assert per_user(broker.acknowledged[4:]) == in_log_order(later)
    assert len(set(broker.ids())) == 8
    assert [r.published for r in finished(svc, destination_id)] == [4, 4]


def test_a_stretch_with_nothing_for_a_destination_moves_it_without_a_round(
    svc: Service, home: Team, clock: Clock
) -> None:
    """Another environment's destination follows the same log: what the sandbox's users
    announce is not its to publish. Its cursor moves past it with no round recorded and
    no connection made; the sandbox's destination publishes the same stretch."""
    sandbox = destination(svc, home)
    production = destination(svc, home, "production")
    churned(svc, home, 2)
    broker = FakeBroker()
    publishing = publisher(svc, clock, broker)
    last = svc.dispatcher.recorder.max_notification_id() or 0
    assert position(svc, production) < last
    publishing.publish_due()
    assert len(broker.acknowledged) == 4
    assert set(broker.connected) == {sandbox}
    assert position(svc, production) >= last
    assert rounds(svc, production) == []
    assert len(rounds(svc, sandbox)) == 1
    # The same again for a later stretch.
    churned(svc, home, 1, "later")
    last = svc.dispatcher.recorder.max_notification_id() or 0
    publishing.publish_due()
    assert len(broker.acknowledged) == 6
    assert position(svc, production) >= last
    assert rounds(svc, production) == []
    assert set(broker.connected) == {sandbox}


def test_a_failed_round_is_retried_on_the_schedule_not_before(
    svc: Service, home: Team, clock: Clock
) -> None:
    """A destination whose broker refuses it keeps its cursor and is retried on the
    webhooks' schedule (the first retry at once, the second 5 s later): not claimed
    before. Its cursor's row says since when it fails and why; a success clears it."""
    destination_id = destination(svc, home)
    churned(svc, home, 2)
    start = position(svc, destination_id)
    broker = FakeBroker()
    broker.refuse = 2
    publishing = publisher(svc, clock, broker)
    first_failure = clock()
    assert publishing.publish_due() == 1
    clock.advance(timedelta(seconds=1))
    assert publishing.publish_due() == 1  # the first retry: at once
    leases = DestinationLeases(svc.db)
    cursor = leases.cursor(destination_id)
    assert cursor is not None
    assert (cursor.attempts, cursor.last_error) == (2, "connection_error")
    assert cursor.failing_since == first_failure
    assert cursor.next_attempt_at == first_failure + timedelta(seconds=6)
    assert position(svc, destination_id) == start
    assert [(r.attempt, r.published, r.cursor) for r in finished(svc, destination_id)] == [
        (1, 0, start),
        (2, 0, start),
    ]
    clock.advance(timedelta(seconds=4))  # 1 s before the second retry
    assert publishing.publish_due() == 0
    assert len(broker.connected) == 2 and broker.acknowledged == []
    clock.advance(timedelta(seconds=2))
    assert publishing.publish_due() == 4
    assert len(broker.acknowledged) == 4
    cursor = leases.cursor(destination_id)
    assert cursor is not None
    assert (cursor.attempts, cursor.failing_since, cursor.last_error) == (0, None, None)
    assert position(svc, destination_id) > start


class Dies(BaseException):
    """The publishing process dies mid-round (after the broker took the messages)."""


def test_the_deletion_report_counts_a_round_never_finished_as_possibly_sent(
    svc: Service, home: Team, clock: Clock
) -> None:
    """A round whose process died after publishing and before its record is "outcome
    unknown, possibly sent" for each user it named (issue 30's rule for a webhook's open
    attempt); the next round's publishes are counted as acknowledged."""
    destination_id = destination(svc, home)
    person, other = churned(svc, home, 2)
    broker = FakeBroker()
    publishing = publisher(svc, clock, broker)

    def dying(messages: Sequence[Message], deadline: float) -> Published:
        FakeBroker.publish(broker, messages, deadline)
        raise Dies()

    broker.publish = dying  # type: ignore[method-assign]
    with pytest.raises(Dies):
        publishing.publish_due()
    [open_round] = rounds(svc, destination_id)
    assert [type(e) for e in open_round] == [PublishRound.Started]
    report = deletion_report(svc, person, CTX)
    assert verify_report(report) == []
    [listed] = report["recipients"]["event_destinations"]["destinations"]
    assert listed["destination_id"] == str(destination_id)
    assert (listed["deliveries"], listed["publishes"], listed["acknowledged"]) == (2, 0, 0)
    assert listed["outcome_unknown"] == 2
    assert listed["first_possibly_sent_at"] is not None
    assert (listed["received"], listed["possibly_received"]) == (False, True)
    # The lease of the dead process runs out; the next round publishes the stretch again.
    del broker.publish
    clock.advance(timedelta(minutes=5))
    assert publishing.publish_due() == 4
    [listed] = deletion_report(svc, person, CTX)["recipients"]["event_destinations"]["destinations"]
    assert (listed["deliveries"], listed["publishes"], listed["acknowledged"]) == (4, 2, 2)
    assert (listed["outcome_unknown"], listed["received"]) == (2, True)
    # The other user's report counts its own messages only.
    [theirs] = deletion_report(svc, other, CTX)["recipients"]["event_destinations"]["destinations"]
    assert (theirs["deliveries"], theirs["acknowledged"]) == (4, 2)


def test_the_outbox_reads_each_stream_as_its_first_event_made_it(
    service: Service, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an announcement reads of a stream (whose it is, its team) is set by its first
    event: the outbox decodes that one event per stream, not the stream's history, and
    records the same deliveries."""
    endpoint_id = witness(service, team)
    people = churned(service, team, 2)
    for user_id in people:  # longer histories
        service.users.delete_user(CTX, team.team_id, user_id)
        service.users.undo_deletion(CTX, team.team_id, user_id)
    founded = service.ledger.founded_many([*people, endpoint_id])
    latest = service.ledger.find_many([*people, endpoint_id])
    assert set(founded) == set(latest) == {*people, endpoint_id}
    for stream_id, aggregate in founded.items():
        assert aggregate.version == 1
        teams = {getattr(aggregate, "team_id"), getattr(latest[stream_id], "team_id")}  # noqa: B009
        assert teams == {team.team_id}
    assert all(latest[user_id].version == 5 for user_id in people)
    decoded: list[int] = []
    to_domain_event = service.ledger.mapper.to_domain_event

    def counted(stored: Any) -> Any:
        decoded.append(stored.originator_version)
        return to_domain_event(stored)

    monkeypatch.setattr(service.ledger.mapper, "to_domain_event", counted)
    monkeypatch.setattr(service.ledger, "find_many", None)  # not called by the outbox
    while service.dispatcher.follow():
        pass
    queued = rows(service, endpoint_id)
    assert [(r.user_id, r.lifecycle_type) for r in queued] == [
        (user_id, event_type)
        for _ in range(2)
        for user_id in people
        for event_type in ("user.deleted", "user.deletion_undone")
    ]
    assert {r.team_id for r in queued} == {team.team_id}
    # One event decoded per stream beside the round's own (its users' first events),
    # not their histories.
    assert decoded.count(1) == len(people)
    assert sorted(v for v in decoded if v > 1) == [2, 2, 3, 3, 4, 4, 5, 5]
