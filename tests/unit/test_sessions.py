"""Sessions (workouts, meals: `domain/connections/sessions.py`): a session's stable key,
which sessions a sync found new or changed, the `DailySynced` that names one (version 2,
and version 1 as stored before sessions), and its announcement: one per session."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID, uuid4

from eventsourcing.persistence import StoredEvent
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.connections.sessions import SessionChange, session_changes, session_key
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.announcements import Announcement, announcements
from healthledger.domain.webhooks.deprecation_calendar import rules_from

from tests.unit.stored_form import MAPPER, stored

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-sessions")
DAY, NEXT = date(2026, 3, 9), date(2026, 3, 10)


def test_a_sessions_key_is_the_providers_id_else_its_place_in_the_day() -> None:
    assert session_key("workouts", DAY, 3, {"id": 42}) == "42"
    assert session_key("meal", DAY, 1, {"name": "lunch"}) == "2026-03-09-meal-1"


def test_new_and_changed_sessions_of_the_changed_days_in_order() -> None:
    run = {"id": "run", "calories": 300}
    ride = {"id": "ride", "calories": 500}
    before = {DAY: [run]}
    after = {DAY: [{**run, "calories": 320}, ride], NEXT: [{"id": "yoga"}]}
    assert session_changes("workouts", before, after, [NEXT, DAY]) == [
        SessionChange(DAY, "run", created=False),
        SessionChange(DAY, "ride", created=True),
        SessionChange(NEXT, "yoga", created=True),
    ]
    # An unchanged session, a removed one, and a day that did not change: nothing.
    assert session_changes("workouts", {DAY: [run, ride]}, {DAY: [run]}, [DAY]) == []
    assert session_changes("workouts", before, after, []) == []


def feed() -> ResourceFeed:
    return ResourceFeed.open(
        CTX,
        T0,
        id=uuid4(),
        connection_id=uuid4(),
        user_id=uuid4(),
        team_id=uuid4(),
        provider="apple_health_kit",
        resource="workouts",
    )


def test_each_session_is_its_own_daily_synced_and_its_own_announcement() -> None:
    workouts = feed()
    workouts.collect_events()
    workouts.synced(CTX, T0, created_days=[NEXT], updated_days=[], session="ride")
    workouts.synced(CTX, T0, created_days=[], updated_days=[DAY], session="run")
    events = workouts.collect_events()
    rules = rules_from(T0, [])
    found = [a for e in events for a in announcements(e, workouts, rules)]
    user, team = workouts.user_id, workouts.team_id
    assert found == [
        Announcement("daily.data.workouts.created", user, team, NEXT, "ride"),
        Announcement("daily.data.workouts.updated", user, team, DAY, "run"),
    ]
    # Each has its own version in the stream: its deliveries' message ids are its own.
    assert len({e.originator_version for e in events}) == 2
    # Stored and loaded back, the event keeps its session.
    (again,) = [MAPPER.to_domain_event(stored(events[0]))]
    assert isinstance(again, ResourceFeed.DailySynced) and again.session == "ride"


def test_a_daily_synced_stored_before_sessions_loads_and_announces_whole_days() -> None:
    state = (
        '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-10T12:00:00+00:00"},'
        '"originator_topic":"healthledger:ResourceFeed","actor":"test:actor",'
        '"request_id":"req-sessions","created_days":[{"_type_":"date_iso",'
        '"_data_":"2026-03-10"}],"updated_days":[]}'
    )
    record = StoredEvent(
        UUID("11111111-2222-4333-8444-000000000009"),
        2,
        "healthledger:ResourceFeed.DailySynced.v1",
        state.encode(),
    )
    event = MAPPER.to_domain_event(record)
    assert isinstance(event, ResourceFeed.DailySyncedV1)
    assert (event.created_days, event.updated_days, event.session) == ([NEXT], [], None)
    workouts = feed()
    # Redacted at the start into version 2 (its days sealed): its fields, the owner's id
    # and the count of its days (old_versions.sealed_facts_successor).
    successor = ResourceFeed.DailySynced(  # type: ignore[call-arg]
        originator_id=event.originator_id,
        originator_version=event.originator_version,
        timestamp=event.timestamp,
        actor=event.actor,
        request_id=event.request_id,
        user_id=workouts.user_id,
        created_days=event.created_days,
        updated_days=event.updated_days,
        session=event.session,
        days_created=1,
    )
    (found,) = announcements(successor, workouts, rules_from(T0, []))
    assert (found.event_type, found.day, found.session) == (
        "daily.data.workouts.created",
        NEXT,
        None,
    )
