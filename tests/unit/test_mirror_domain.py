"""The receiver's mirror of a user, built from webhook messages: its events, state and
replay, without I/O (the vault port is a dictionary here; the receiver's tests use the
real key store)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import StoredEvent
from healthledger.domain.mirror.users import (
    ACTIVE,
    CONNECTED,
    CREATED,
    DELETED,
    ERASED,
    ERROR,
    UPDATED,
    ConnectionCreated,
    ConnectionErrored,
    DailyDataAnnounced,
    DeletionAnnounced,
    Envelope,
    ErasureAnnounced,
    HistoricalDataAnnounced,
    MirroredUser,
    TeamMismatch,
    UndoAnnounced,
    holds_clear_identifier,
)

from tests.unit.stored_form import MAPPER, assert_replays, stock_transcoder, stored
from tests.unit.vaults import DictVault

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
USER_ID, TEAM_ID = uuid4(), uuid4()


def envelope(event_type: str, client_user_id: str | None = "client-1") -> Envelope:
    return Envelope(
        message_id=f"msg_{uuid4().hex}",
        event_type=event_type,
        user_id=USER_ID,
        team_id=TEAM_ID,
        client_user_id=client_user_id,
    )


def lifecycle(event_type: str) -> Envelope:
    # Our lifecycle messages name no client_user_id.
    return envelope(event_type, client_user_id=None)


def connected_user(vault: DictVault) -> MirroredUser:
    user = MirroredUser.start(envelope("provider.connection.created"), T0, vault)
    user.announce(
        envelope("provider.connection.created"),
        T0,
        ConnectionCreated("oura", "Oura", None, {"sleep": "available"}, "oura-77"),
        vault,
    )
    return user


def test_the_first_message_founds_the_mirror_on_the_users_own_id() -> None:
    vault = DictVault()
    first = envelope("provider.connection.created")
    user = MirroredUser.start(first, T0, vault)
    assert (user.id, user.team_id, user.status) == (USER_ID, TEAM_ID, ACTIVE)
    assert user.client_user_id_in(vault) == "client-1"
    assert (user.connections, user.resources, user.last_message_at) == ({}, {}, T0)
    (created,) = assert_replays(user)
    assert isinstance(created, MirroredUser.Created)
    assert (created.message_id, created.event_type) == (first.message_id, first.event_type)
    # The identifier is sealed with the user's key, never recorded in clear.
    assert created.client_user_id is None and created.sealed_client_user_id == "sealed-1"
    assert b"client-1" not in stored(created).state
    assert not holds_clear_identifier(created)


def test_the_envelope_changes_the_client_user_id_and_refuses_another_team() -> None:
    vault = DictVault()
    user = MirroredUser.start(envelope("provider.connection.created"), T0, vault)
    user.note_envelope(envelope("daily.data.sleep.created"), T0, vault)
    user.note_envelope(envelope("daily.data.sleep.created", client_user_id=None), T0, vault)
    user.note_envelope(envelope("daily.data.sleep.created", client_user_id="client-2"), T0, vault)
    assert user.client_user_id_in(vault) == "client-2"
    other_team = Envelope(
        message_id="msg_x",
        event_type="daily.data.sleep.created",
        user_id=USER_ID,
        team_id=uuid4(),
        client_user_id="client-2",
    )
    with pytest.raises(TeamMismatch):
        user.note_envelope(other_team, T0, vault)
    events = assert_replays(user)
    assert [type(e).__name__ for e in events] == ["Created", "ClientUserIdChanged"]
    assert all(b"client-2" not in stored(e).state for e in events)


def test_connections_and_announced_data_are_mirrored_per_provider_and_resource() -> None:
    vault = DictVault()
    user = MirroredUser.start(envelope("provider.connection.error"), T0, vault)
    later = T0 + timedelta(minutes=1)
    # An error may come first: what little is known is kept.
    user.announce(
        envelope("provider.connection.error"),
        later,
        ConnectionErrored(provider="oura", error_type="token_revoked", error_message="gone"),
        vault,
    )
    assert user.connections["oura"]["status"] == ERROR
    assert user.connections["oura"]["error_details"]["errored_at"] == later
    user.announce(
        envelope("provider.connection.created"),
        later,
        ConnectionCreated(
            provider="oura",
            name="Oura",
            logo=None,
            resource_availability={"sleep": "available"},
            external_user_id="oura-77",
        ),
        vault,
    )
    oura = user.connections["oura"]
    assert (oura["status"], oura["error_details"]) == (CONNECTED, None)
    assert oura["external_user_id"] is None  # only sealed
    assert vault.open(USER_ID, oura["sealed_external_user_id"]) == "oura-77"
    user.announce(
        envelope("historical.data.sleep.created"),
        later,
        HistoricalDataAnnounced(
            provider="oura", resource="sleep", start_date=T0 - timedelta(days=30), end_date=T0
        ),
        vault,
    )
    for day, change in [(date(2026, 3, 1), CREATED), (date(2026, 2, 20), UPDATED)]:
        user.announce(
            envelope(f"daily.data.sleep.{change}"),
            later,
            DailyDataAnnounced(provider="oura", resource="sleep", calendar_date=day, change=change),
            vault,
        )
    feed = user.resources["oura"]["sleep"]
    assert feed["historical_announcements"] == 1
    assert feed["historical"]["end_date"] == T0
    assert (feed["days_created"], feed["days_updated"]) == (1, 1)
    assert (feed["first_calendar_date"], feed["last_calendar_date"]) == (
        date(2026, 2, 20),
        date(2026, 3, 1),
    )
    assert (feed["last_event_type"], user.last_message_at) == ("daily.data.sleep.updated", later)
    events = assert_replays(user)
    assert len(events) == 6
    assert all(b"oura-77" not in stored(e).state for e in events)


# -- the user's lifecycle upstream -----------------------------------------------------------


def test_a_deletion_and_its_undo_follow_the_upstream_times() -> None:
    vault = DictVault()
    user = connected_user(vault)
    earlier = assert_replays(user)
    deleted_at = T0 + timedelta(hours=1)
    due = deleted_at + timedelta(days=7)
    assert user.announce(
        lifecycle("user.deleted"), T0, DeletionAnnounced(deleted_at, due, "req-del"), vault
    )
    assert (user.status, user.deleted_at, user.erasure_due_at) == (DELETED, deleted_at, due)
    undone_at = deleted_at + timedelta(hours=1)
    assert user.announce(
        lifecycle("user.deletion_undone"), T0, UndoAnnounced(undone_at, "req-undo"), vault
    )
    assert (user.status, user.deleted_at, user.erasure_due_at) == (ACTIVE, None, None)
    # A retried user.deleted arriving after the undo that followed it is stale: no event.
    assert not user.announce(
        lifecycle("user.deleted"), T0, DeletionAnnounced(deleted_at, due, "req-del"), vault
    )
    assert user.status == ACTIVE
    events = assert_replays(user, earlier)
    assert [type(e).__name__ for e in events] == ["Deleted", "DeletionUndone"]
    assert events[0].upstream_request_id == "req-del"
    # Deleted again later: a newer fact applies.
    again = undone_at + timedelta(days=1)
    assert user.announce(
        lifecycle("user.deleted"), T0, DeletionAnnounced(again, due, "req-2"), vault
    )
    assert (user.status, user.deleted_at) == (DELETED, again)


def test_an_erasure_forgets_the_identifiers_and_is_final() -> None:
    vault = DictVault()
    user = connected_user(vault)
    earlier = assert_replays(user)
    erased_at = T0 + timedelta(days=8)
    announced = ErasureAnnounced(erased_at, ("user_data_key", "read_model:users"))
    user.erase(
        lifecycle("user.erased"),
        T0,
        announced,
        removed=["mirror_user_key"],
        clear_events_left=0,
    )
    assert (user.status, user.erased_at) == (ERASED, erased_at)
    assert (user.client_user_id, user.sealed_client_user_id) == (None, None)
    oura = user.connections["oura"]
    assert (oura["external_user_id"], oura["sealed_external_user_id"]) == (None, None)
    assert oura["status"] == CONNECTED  # statuses and counts stay: nothing personal
    assert not user.may_be_snapshotted
    # After the erasure nothing is learnt: no lifecycle fact, no second erasure.
    assert not user.announce(
        lifecycle("user.deletion_undone"), T0, UndoAnnounced(erased_at, "r"), vault
    )
    user.erase(lifecycle("user.erased"), T0, announced, removed=[], clear_events_left=0)
    (erased,) = assert_replays(user, earlier)
    assert isinstance(erased, MirroredUser.Erased)
    assert erased.upstream_removed == ["user_data_key", "read_model:users"]
    assert erased.removed == ["mirror_user_key"]
    with pytest.raises(TypeError):
        user.announce(lifecycle("user.erased"), T0, announced, vault)


# -- version 1: identifiers in clear ---------------------------------------------------------

# A Created and a ProviderConnected event as version 1 stored them (identifiers in clear).
CREATED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00+00:00"},'
    '"originator_topic":"healthledger:MirroredUser","message_id":"msg_1",'
    '"event_type":"provider.connection.created","team_id":{"_type_":"uuid_hex",'
    '"_data_":"%s"},"client_user_id":"client-1"}'
)
CONNECTED_V1 = (
    '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00+00:00"},'
    '"message_id":"msg_1","event_type":"provider.connection.created","provider":"oura",'
    '"name":"Oura","logo":null,"resource_availability":{},"external_user_id":"oura-77"}'
)


def version_1_events() -> list[Any]:
    rows = [
        ("healthledger:MirroredUser.Created.v1", CREATED_V1 % TEAM_ID.hex),
        ("healthledger:MirroredUser.ProviderConnected.v1", CONNECTED_V1),
    ]
    return [
        MAPPER.to_domain_event(StoredEvent(USER_ID, version, topic, state.encode()))
        for version, (topic, state) in enumerate(rows, start=1)
    ]


def test_version_1_events_load_with_their_clear_identifiers_and_are_counted() -> None:
    created, connected = version_1_events()
    assert (created.client_user_id, created.sealed_client_user_id) == ("client-1", None)
    assert (connected.external_user_id, connected.sealed_external_user_id) == ("oura-77", None)
    assert holds_clear_identifier(created) and holds_clear_identifier(connected)
    user = connected.mutate(created.mutate(None))
    vault = DictVault()
    assert user.client_user_id_in(vault) == "client-1"
    # A changed client_user_id is sealed from then on; the clear one leaves the state.
    user.note_envelope(envelope("daily.data.sleep.created", "client-2"), T0, vault)
    assert (user.client_user_id, user.client_user_id_in(vault)) == (None, "client-2")


def test_a_version_1_snapshot_is_upcast() -> None:
    created, connected = version_1_events()
    user = connected.mutate(created.mutate(None))
    # As stored and read back (a copy: the user's own dictionaries stay as they are).
    transcoder = stock_transcoder()
    state = transcoder.decode(transcoder.encode(Snapshot.take(user).state))
    # The state a version 1 snapshot held: none of version 2's attributes.
    for name in ("sealed_client_user_id", "status", "deleted_at", "erasure_due_at"):
        del state[name]
    for name in ("erased_at", "lifecycle_at", "class_version"):
        state.pop(name, None)
    state["connections"]["oura"].pop("sealed_external_user_id")
    legacy = Snapshot(
        originator_id=USER_ID,
        originator_version=2,
        timestamp=T0,
        topic="healthledger:MirroredUser",
        state=state,
    )
    restored = legacy.mutate(None)
    assert isinstance(restored, MirroredUser)
    assert restored == user
    assert restored.status == ACTIVE and restored.sealed_client_user_id is None
