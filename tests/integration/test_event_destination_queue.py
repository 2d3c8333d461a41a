"""The event destinations' publisher reads less per round (issue 35's publishing rate),
and still starts only pending deliveries and keeps a user's messages in log order. On
both databases, with no broker (nothing is published here):

- the publisher's start records on the deliveries its own process's outbox has just
  recorded, as saved, without reading them again; one another writer changed meanwhile
  (an erasure's drop, a late outcome) is started on a fresh copy, or not at all;
- a destination's queue, with no user's message waiting for a retry, is its due rows in
  log order; with one waiting, none of that user's later messages, and every other
  user's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import webhook_deliveries
from healthledger.adapters.persistence.leases.event_destinations import DestinationLeases
from healthledger.adapters.webhooks.dispatcher import PostResult, attempt_recorder, drop_recorder
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import DROPPED, PENDING, WebhookDelivery
from healthledger.domain.webhooks.event_destinations import NATS, Route
from sqlalchemy import select

from tests.conftest import Team

CTX = CommandContext(actor="test:actor", request_id="req-destination-queue")


def destination(service: Service, team: Team) -> UUID:
    """A NATS destination of every user's lifecycle type (never connected to here)."""
    return service.event_destinations.create(
        CTX,
        team.team_id,
        "sandbox",
        kind=NATS,
        connection={"host": "127.0.0.1", "port": 4222},
        routes=[Route("user.", "health.users")],
    ).id


def churned(service: Service, team: Team, count: int) -> list[UUID]:
    """`count` users deleted and restored (two messages each, deleted then restored)."""
    people = []
    for number in range(count):
        user = service.users.create_user(CTX, team.team_id, client_user_id=f"queue-{number}")
        service.users.delete_user(CTX, team.team_id, user.id)
        service.users.undo_deletion(CTX, team.team_id, user.id)
        people.append(user.id)
    return people


def rows(service: Service, destination_id: UUID) -> list[Any]:
    d = webhook_deliveries.c
    with service.db.read() as conn:
        return list(
            conn.execute(
                select(webhook_deliveries)
                .where(d.endpoint_id == destination_id)
                .order_by(d.log_position, d.message_id)
            ).all()
        )


def test_the_publishers_start_records_on_the_outboxs_copies_and_a_changed_one_afresh(
    service: Service, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination_id = destination(service, team)
    churned(service, team, 3)
    while service.dispatcher.follow():
        pass
    queued = rows(service, destination_id)
    assert len(queued) == 6
    # Another writer drops one of them meanwhile (an erasure): the outbox's copy of it
    # is stale now.
    dropped = queued[0]
    now = service.clock()
    assert service.dispatcher.record([(dropped, drop_recorder(CTX, now, "user erased"))]) == {
        dropped.delivery_id
    }
    reads: list[int] = []
    real_find_many = service.ledger.find_many

    def counted(ids: Any) -> Any:
        reads.append(len(ids))
        return real_find_many(ids)

    monkeypatch.setattr(service.ledger, "find_many", counted)
    saved: dict[UUID, WebhookDelivery] = {}
    attempts = service.dispatcher.start(CTX, queued, saved)
    # The dropped one is not started (its fresh copy is not pending); every other one is,
    # once, whatever the batch met.
    assert set(attempts) == {row.delivery_id for row in queued[1:]}
    assert set(attempts.values()) == {1}
    for row in queued:
        events = list(service.ledger.events.get(row.delivery_id))
        started = [e for e in events if isinstance(e, WebhookDelivery.AttemptStarted)]
        assert len(started) == (0 if row is dropped else 1)
    # The outcomes go on the copies saved: nothing read again.
    reads.clear()
    ok = PostResult(None, 1.0, None)
    recorded = service.dispatcher.record(
        [(row, attempt_recorder(CTX, now, ok, attempts[row.delivery_id])) for row in queued[1:]],
        saved,
    )
    assert recorded == set(attempts)
    assert reads == []
    statuses = {row.delivery_id: row.status for row in rows(service, destination_id)}
    assert statuses.pop(dropped.delivery_id) == DROPPED
    assert set(statuses.values()) == {"succeeded"}

    # A clean round: the outbox's copies are started without a read.
    churned_more = churned_after(service, team)
    while service.dispatcher.follow():
        pass
    fresh = [r for r in rows(service, destination_id) if r.user_id in churned_more]
    assert len(fresh) == 2
    reads.clear()
    assert set(service.dispatcher.start(CTX, fresh)) == {r.delivery_id for r in fresh}
    assert reads == [], "the outbox's copies, not read again"
    # Started once only: a second start reads them (they are no longer the outbox's) and
    # starts attempt 2 on the saved version.
    again = service.dispatcher.start(CTX, fresh)
    assert set(again.values()) == {2}
    assert reads, "read from the log"


def churned_after(service: Service, team: Team) -> set[UUID]:
    user = service.users.create_user(CTX, team.team_id, client_user_id="queue-later")
    service.users.delete_user(CTX, team.team_id, user.id)
    service.users.undo_deletion(CTX, team.team_id, user.id)
    return {user.id}


def test_the_queue_leaves_out_what_would_overtake_a_users_waiting_message(
    service: Service, team: Team
) -> None:
    destination_id = destination(service, team)
    first, second, third = churned(service, team, 3)
    while service.dispatcher.follow():
        pass
    leases = DestinationLeases(service.db)
    now = service.clock()
    queued = rows(service, destination_id)
    # No user's message waits: every due row, in the order of the log.
    found = leases.queue(destination_id, now, 100)
    assert [r.delivery_id for r in found] == [r.delivery_id for r in queued]
    assert [r.delivery_id for r in leases.queue(destination_id, now, 4)] == [
        r.delivery_id for r in queued[:4]
    ]
    # The second user's first message failed twice (the first retry is at once) and
    # waits for its second retry (5 s).
    waiting = next(r for r in queued if r.user_id == second)
    failed = PostResult(None, 1.0, "connection_error")
    for _ in range(2):
        attempts = service.dispatcher.start(CTX, [waiting])
        attempt = attempts[waiting.delivery_id]
        recorder = attempt_recorder(CTX, now, failed, attempt, endless=True)
        assert service.dispatcher.record([(waiting, recorder)]) == {waiting.delivery_id}
    found = leases.queue(destination_id, now, 100)
    assert {r.user_id for r in found} == {first, third}
    assert [r.delivery_id for r in found] == [
        r.delivery_id for r in queued if r.user_id in {first, third}
    ]
    # Once its retry is due, the user's messages are all due again, in order.
    later = now + timedelta(seconds=6)
    assert [r.delivery_id for r in leases.queue(destination_id, later, 100)] == [
        r.delivery_id for r in queued
    ]
    assert {r.status for r in rows(service, destination_id)} == {PENDING}


def test_the_outbox_reads_each_stream_as_its_first_event_made_it(
    service: Service, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an announcement reads of a stream (whose it is, its team) is set by its first
    event: the outbox decodes that one event per stream, not the stream's history, and
    records the same deliveries."""
    destination_id = destination(service, team)
    people = churned(service, team, 2)
    for user_id in people:  # longer histories
        service.users.delete_user(CTX, team.team_id, user_id)
        service.users.undo_deletion(CTX, team.team_id, user_id)
    founded = service.ledger.founded_many([*people, destination_id])
    latest = service.ledger.find_many([*people, destination_id])
    assert set(founded) == set(latest) == {*people, destination_id}
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
    queued = rows(service, destination_id)
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
