"""A user's deletion and erasure cascade through the `UserDeletionCascade` port, on the
ledger over eventsourcing's in-memory infrastructure (no database): the participants the
composition root wires (connections, orders, webhook deliveries) end what they hold about
the user, and the lifecycle saves it all with the user's events, in one save."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.user_deletion import UserConnections
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order
from healthledger.domain.labs.user_deletion import UserOrders
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.deletion_cascade import DeletionTargets, UserDeletionCascade
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES, UserLifecycle
from healthledger.domain.users.user import ClientUserIdClaim, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from healthledger.domain.webhooks.user_deletion import DROPPED_BY_ERASURE, UserDeliveries

CTX = CommandContext(actor="team_api_key:k", request_id="req-delete")
SWEEP = CommandContext(actor="system:scheduler", request_id="req-sweep")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)
TEAM = uuid.UUID("00000000-0000-4000-8000-000000000001")


class Saves(POPOApplicationRecorder):
    """eventsourcing's in-memory recorder, noting each save's events (one call each)."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[list[StoredEvent]] = []

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        self.saves.append(list(stored_events))
        return super().insert_events(stored_events, **kwargs)

    def last_topics(self) -> list[str]:
        """The last save's events, as `<aggregate>.<event>` in the order they were stored."""
        return [e.topic.removeprefix("healthledger:").split(".v")[0] for e in self.saves[-1]]


class Factory(POPOFactory):
    def __init__(self, recorder: Saves) -> None:
        super().__init__(env={})
        self.recorder = recorder

    def application_recorder(self) -> Saves:
        return self.recorder


class Vault:
    """The vault port as far as a deletion and an erasure use it: neither seals."""

    def seal(self, user_id: UUID, value: Any) -> str:
        return f"sealed:{value}"

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        return sealed.removeprefix("sealed:")

    def has_key(self, user_id: UUID) -> bool:
        return True

    def discard(self, user_id: UUID) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class World:
    """A lifecycle wired as the composition root wires it, with the read models' answers
    (what a deletion ends, the queued deliveries) kept by the test."""

    def __init__(self) -> None:
        self.recorder = Saves()
        self.ledger = Ledger(Factory(self.recorder))
        self.clock = Clock()
        self.targets: dict[str, list[UUID]] = {}
        self.live: dict[UUID, list[UUID]] = {}
        self.queued: dict[UUID, list[UUID]] = {}
        self.cascade: list[UserDeletionCascade] = [
            UserConnections(self.ledger, lambda user_id: self.live.get(user_id, [])),
            UserOrders(self.ledger),
            UserDeliveries(self.ledger, self.queued_deliveries),
        ]
        self.users = UserLifecycle(
            self.ledger,
            Vault(),
            self.clock,
            GRACE,
            erasure_inventory=lambda user_ids: {},
            cascade=self.cascade,
            deletion_targets=self.deletion_targets,
        )

    def deletion_targets(self, user_id: UUID) -> DeletionTargets:
        return self.targets

    def queued_deliveries(self, user_ids: Sequence[UUID]) -> Mapping[UUID, Sequence[UUID]]:
        return {uid: self.queued[uid] for uid in user_ids if uid in self.queued}

    def save(self, *aggregates: Aggregate) -> None:
        self.ledger.save(*aggregates)

    def user(self) -> User:
        user_id = uuid.uuid4()
        claim = ClientUserIdClaim.start(CTX, T0, TEAM, f"digest-{user_id}", user_id)
        user = User.register(
            CTX,
            T0,
            user_id=user_id,
            team_id=TEAM,
            sealed_client_user_id="sealed:client-1",
            claim_id=claim.id,
            fallback_time_zone=None,
            sealed_birth_date=None,
            ingestion_start=None,
            ingestion_end=None,
        )
        self.save(claim, user)
        return user

    def connection(self, user: User, provider: str, *, live: bool = True) -> Connection:
        connection = Connection.connect_new(
            CTX,
            T0,
            user_id=user.id,
            team_id=TEAM,
            provider=provider,
            sealed_external_user_id=None,
            resource_availability={},
            demo=True,
        )
        if not live:
            connection.deregister(CTX, T0, "by the team")
        self.save(connection)
        return connection

    def order(self, user: User, *, open_: bool = True) -> Order:
        order = Order.place(
            CTX,
            T0,
            order_id=uuid.uuid4(),
            user_id=user.id,
            team_id=TEAM,
            environment="sandbox",
            lab_test_id=uuid.uuid4(),
            lab_test_name="Lipids",
            lab_id=1,
            collection_method="walk_in_test",
            marker_ids=[1],
            sealed_patient_details="sealed:details",
            sealed_patient_address="sealed:address",
            sealed_request_digest=None,
            status="received.walk_in_test.ordered",
            next_step_at=None,
        )
        if not open_:
            order.cancel(CTX, T0, "team_request")
        self.save(order)
        return order

    def delivery(self, user: User, n: int, *, pending: bool = True) -> WebhookDelivery:
        delivery = WebhookDelivery.create(
            CTX,
            T0,
            endpoint_id=uuid.uuid4(),
            team_id=TEAM,
            user_id=user.id,
            event_type="user.deleted",
            source_id=user.id,
            source_version=n,
            source_timestamp=T0,
            day=None,
            log_position=n,
        )
        if not pending:
            delivery.drop(CTX, T0, "endpoint disabled")
        self.save(delivery)
        return delivery

    def find(self, aggregate_id: UUID) -> Any:
        return self.ledger.find(aggregate_id)


@pytest.fixture
def world() -> World:
    return World()


def test_a_deletion_ends_the_users_connections_and_orders_in_its_own_save(world: World) -> None:
    user = world.user()
    first, gone = world.connection(user, "oura"), world.connection(user, "whoop", live=False)
    second = world.connection(user, "garmin")
    order, closed = world.order(user), world.order(user, open_=False)
    # The read models may be behind: a target the aggregate shows ended is left alone.
    world.targets = {
        "connections": [first.id, gone.id, second.id],
        "orders": [order.id, closed.id],
    }
    saves = len(world.recorder.saves)

    world.users.delete_user(CTX, TEAM, user.id)

    assert len(world.recorder.saves) == saves + 1
    # The user's events first, then each participant's, in the composition root's order.
    assert world.recorder.last_topics() == [
        "User.Deleted",
        "ClientUserIdClaim.Released",
        "Connection.Deregistered",
        "Connection.Deregistered",
        "Order.Cancelled",
    ]
    stored = world.recorder.saves[-1]
    assert [e.originator_id for e in stored[2:]] == [first.id, second.id, order.id]
    for connection_id in (first.id, second.id):
        connection = world.find(connection_id)
        assert not connection.is_live
    cancelled = world.find(order.id)
    assert not cancelled.is_open and cancelled.cancel_reason == "user_deleted"
    assert all(b'"user_deleted"' in e.state for e in stored[2:])
    assert all(b'"req-delete"' in e.state for e in stored)
    # An undo restores none of them.
    world.users.undo_deletion(CTX, TEAM, user.id)
    assert world.recorder.last_topics() == ["User.DeletionUndone", "ClientUserIdClaim.Claimed"]
    assert not world.find(first.id).is_live


def test_a_deletion_with_nothing_to_end_saves_the_user_and_its_claim(world: World) -> None:
    user = world.user()
    world.users.delete_user(CTX, TEAM, user.id)
    assert world.recorder.last_topics() == ["User.Deleted", "ClientUserIdClaim.Released"]


def test_a_gone_users_connection_left_behind_is_deregistered(world: World) -> None:
    user = world.user()
    world.users.delete_user(CTX, TEAM, user.id)
    # A connect that raced the deletion.
    raced = world.connection(user, "oura")
    world.live[user.id] = [raced.id]
    world.order(user)  # the simulated lab's sweep cancels this one, not the erasure sweep

    assert world.users.deregister_connections_of_gone_user(SWEEP, user.id) == 1
    assert world.recorder.last_topics() == ["Connection.Deregistered"]
    assert not world.find(raced.id).is_live
    # Done: nothing is left behind any more.
    world.live[user.id] = []
    assert world.users.deregister_connections_of_gone_user(SWEEP, user.id) == 0


def test_a_live_users_connections_are_not_ended_as_left_behind(world: World) -> None:
    user = world.user()
    connection = world.connection(user, "oura")
    world.live[user.id] = [connection.id]
    assert world.users.deregister_connections_of_gone_user(SWEEP, user.id) == 0
    assert world.find(connection.id).is_live


def test_an_erasure_drops_the_queued_deliveries_in_its_save_and_counts_them(
    world: World,
) -> None:
    user, other = world.user(), world.user()
    queued = [world.delivery(user, 1), world.delivery(user, 2)]
    sent = world.delivery(user, 3, pending=False)
    world.queued[user.id] = [queued[0].id, sent.id, queued[1].id]
    for each in (user, other):
        world.users.delete_user(CTX, TEAM, each.id)
    world.clock.now = T0 + GRACE + timedelta(seconds=1)

    assert world.users.erase_users(SWEEP, [user.id, other.id]) == 2

    assert world.recorder.last_topics() == [
        "User.Erased",
        "User.Erased",
        "WebhookDelivery.Dropped",
        "WebhookDelivery.Dropped",
    ]
    stored = world.recorder.saves[-1]
    assert [e.originator_id for e in stored] == [user.id, other.id, queued[0].id, queued[1].id]
    for delivery in queued:
        dropped = world.find(delivery.id)
        assert dropped.status != "pending"
    assert all(DROPPED_BY_ERASURE.encode() in e.state for e in stored[2:])
    # What the erasure's transaction checks: every place, the dropped deliveries counted.
    checked = _checked(world, user.id)
    assert list(checked) == ERASURE_REMOVES
    assert checked[QUEUED_DELIVERIES] == 2
    assert _checked(world, other.id)[QUEUED_DELIVERIES] == 0


def test_an_erasure_of_one_user_is_idempotent(world: World) -> None:
    user = world.user()
    world.queued[user.id] = [world.delivery(user, 1).id]
    world.users.delete_user(CTX, TEAM, user.id)
    world.clock.now = T0 + GRACE + timedelta(seconds=1)
    assert world.users.erase_user(SWEEP, user.id) is True
    assert world.recorder.last_topics() == ["User.Erased", "WebhookDelivery.Dropped"]
    saves = len(world.recorder.saves)
    assert world.users.erase_user(SWEEP, user.id) is False
    assert len(world.recorder.saves) == saves


def _checked(world: World, user_id: UUID) -> dict[str, int]:
    """The `checked` of the user's Erased event, as stored."""
    (erased,) = [
        world.ledger.mapper.to_domain_event(e)
        for save in world.recorder.saves
        for e in save
        if e.originator_id == user_id and e.topic.startswith("healthledger:User.Erased")
    ]
    return dict(erased.checked)
