"""The receiver's mirror of a user, built from webhook messages: its events, state and
replay, without I/O."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

import pytest
from healthledger.domain.mirror.users import (
    CONNECTED,
    CREATED,
    ERROR,
    UPDATED,
    ConnectionCreated,
    ConnectionErrored,
    DailyDataAnnounced,
    Envelope,
    HistoricalDataAnnounced,
    MirroredUser,
    TeamMismatch,
)

from tests.unit.stored_form import assert_replays

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


def test_the_first_message_founds_the_mirror_on_the_users_own_id() -> None:
    first = envelope("provider.connection.created")
    user = MirroredUser.start(first, T0)
    assert (user.id, user.team_id, user.client_user_id) == (USER_ID, TEAM_ID, "client-1")
    assert (user.connections, user.resources, user.last_message_at) == ({}, {}, T0)
    (created,) = assert_replays(user)
    assert isinstance(created, MirroredUser.Created)
    assert (created.message_id, created.event_type) == (first.message_id, first.event_type)


def test_the_envelope_changes_the_client_user_id_and_refuses_another_team() -> None:
    user = MirroredUser.start(envelope("provider.connection.created"), T0)
    user.note_envelope(envelope("daily.data.sleep.created"), T0)
    user.note_envelope(envelope("daily.data.sleep.created", client_user_id=None), T0)
    user.note_envelope(envelope("daily.data.sleep.created", client_user_id="client-2"), T0)
    assert user.client_user_id == "client-2"
    other_team = Envelope(
        message_id="msg_x",
        event_type="daily.data.sleep.created",
        user_id=USER_ID,
        team_id=uuid4(),
        client_user_id="client-2",
    )
    with pytest.raises(TeamMismatch):
        user.note_envelope(other_team, T0)
    events = assert_replays(user)
    assert [type(e).__name__ for e in events] == ["Created", "ClientUserIdChanged"]


def test_connections_and_announced_data_are_mirrored_per_provider_and_resource() -> None:
    user = MirroredUser.start(envelope("provider.connection.error"), T0)
    later = T0 + timedelta(minutes=1)
    # An error may come first: what little is known is kept.
    user.announce(
        envelope("provider.connection.error"),
        later,
        ConnectionErrored(provider="oura", error_type="token_revoked", error_message="gone"),
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
            external_user_id=None,
        ),
    )
    assert user.connections["oura"]["status"] == CONNECTED
    assert user.connections["oura"]["error_details"] is None
    user.announce(
        envelope("historical.data.sleep.created"),
        later,
        HistoricalDataAnnounced(
            provider="oura", resource="sleep", start_date=T0 - timedelta(days=30), end_date=T0
        ),
    )
    for day, change in [(date(2026, 3, 1), CREATED), (date(2026, 2, 20), UPDATED)]:
        user.announce(
            envelope(f"daily.data.sleep.{change}"),
            later,
            DailyDataAnnounced(provider="oura", resource="sleep", calendar_date=day, change=change),
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
