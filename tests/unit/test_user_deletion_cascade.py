"""A user's deletion and erasure cascade through the `UserDeletionCascade` port, on the
ledger over eventsourcing's in-memory infrastructure (no database): the participants the
composition root wires (connections, orders, webhook deliveries) end what they hold about
the user, and the lifecycle saves it all with the user's events, in one save."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest
from healthledger.domain.users.lifecycle import ERASURE_REMOVES, QUEUED_DELIVERIES
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.user_deletion import DROPPED_BY_ERASURE

from tests.recorded import loaded
from tests.unit.in_memory import CTX, GRACE, SWEEP, T0, TEAM, World


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
        loaded(world.ledger.mapper, e)
        for save in world.recorder.saves
        for e in save
        if e.originator_id == user_id and e.topic.startswith("healthledger:User.Erased")
    ]
    assert isinstance(erased, User.Erased)
    return dict(erased.checked)
