"""A session's samples by its id (docs/data.md#sessions): the id a sleep or workout
summary answers leads to its samples (`GET /v2/timeseries/sleep/{sleep_id}/stream`,
`GET /v2/timeseries/workouts/{workout_id}/stream`) through the session index; another
team's, an unknown, a deleted or erased user's id is a 404, a malformed one a 422; the
index is sealed, backfilled at the start for sessions stored before it, and erased with
the user. On both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import session_index, session_index_backfill
from healthledger.adapters.persistence.health_data.sessions import index_stored_sessions
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.context import CommandContext
from sqlalchemy import delete, func, insert, select

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect
from tests.integration.test_summaries import ids_of

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
FIRST = T0.date() - timedelta(days=14)
CTX = CommandContext(actor="test:actor", request_id="req-session-streams")


def get(client: TestClient, team: Team, path: str, **params: Any) -> Any:
    with freeze_time(T0):
        response = client.get(path, params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def team(service: Service) -> Team:
    # Made before every instant the tests travel to (an instant before the team is a 422).
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture(autouse=True)
def routes_built(client: TestClient, team: Team) -> None:
    """Each read asked once before the tests freeze time (as test_health_data_as_of
    does: under freezegun `datetime`, as_of's type, is its fake class)."""
    for kind in ("sleep", "workouts"):
        client.get(f"/v2/timeseries/{kind}/{uuid4()}/stream", headers=team.headers)


@pytest.fixture
def oura(service: Service, client: TestClient, team: Team) -> str:
    with freeze_time(T0):
        user = create_user(client, team, "streams")["user_id"]
        connect(client, team, user, "oura")
        service.jobs.run_due_pulls()
    return str(user)


def summaries(client: TestClient, team: Team, user: str, resource: str) -> list[dict[str, Any]]:
    found = get(
        client,
        team,
        f"/v2/summary/{resource}/{user}",
        start_date=str(FIRST),
        end_date=str(T0.date()),
    )
    return list(found[resource])


def samples(client: TestClient, team: Team, user: str, resource: str, day: str) -> list[Any]:
    # The night starts the evening before its day: both days' samples.
    first = (datetime.fromisoformat(day) - timedelta(days=1)).date().isoformat()
    return list(
        get(client, team, f"/v2/timeseries/{user}/{resource}", start_date=first, end_date=day)
    )


def within(found: list[dict[str, Any]], start: str, end: str) -> list[dict[str, Any]]:
    low, high = datetime.fromisoformat(start), datetime.fromisoformat(end)
    return [s for s in found if low <= datetime.fromisoformat(s["timestamp"]) <= high]


def test_a_sleeps_id_answers_the_nights_samples_of_its_provider(
    client: TestClient, team: Team, oura: str
) -> None:
    sleeps = summaries(client, team, oura, "sleep")
    assert len(sleeps) > 5
    for sleep in sleeps[:3]:
        stream = get(client, team, f"/v2/timeseries/sleep/{sleep['id']}/stream")
        assert set(stream) == {"heartrate", "hrv", "respiratory_rate", "hypnogram"}
        day, start, end = sleep["calendar_date"], sleep["bedtime_start"], sleep["bedtime_stop"]
        for resource, found in stream.items():
            # Exactly the samples the timeseries getter has in the night, in time order.
            expected = within(samples(client, team, oura, resource, day), start, end)
            assert found == expected, resource
        assert stream["heartrate"] and stream["hypnogram"]  # the demo ring has them
        # Each night its own samples: a 5-minute stage per 5 minutes in bed.
        in_bed = datetime.fromisoformat(end) - datetime.fromisoformat(start)
        assert abs(len(stream["hypnogram"]) - in_bed / timedelta(minutes=5)) <= 1


def test_a_workouts_id_answers_its_heart_rate_as_columns(
    client: TestClient, team: Team, oura: str
) -> None:
    workouts = summaries(client, team, oura, "workouts")
    assert workouts
    lengths = []
    for workout in workouts[:4]:
        stream = get(client, team, f"/v2/timeseries/workouts/{workout['id']}/stream")
        heart = within(
            samples(client, team, oura, "heartrate", workout["calendar_date"]),
            workout["time_start"],
            workout["time_end"],
        )
        assert stream["time"] == [
            int(datetime.fromisoformat(s["timestamp"]).timestamp()) for s in heart
        ]
        assert stream["heartrate"] == [round(s["value"]) for s in heart]
        lengths.append(len(stream["time"]))
    # A heart rate a minute while worn (a workout may fall while the ring charges).
    assert max(lengths) > 10, lengths


def test_ids_of_another_team_another_resource_unknown_or_malformed_are_refused(
    client: TestClient, team: Team, other_team: Team, oura: str
) -> None:
    sleep_id = summaries(client, team, oura, "sleep")[0]["id"]
    workout_id = summaries(client, team, oura, "workouts")[0]["id"]
    sleep_path = f"/v2/timeseries/sleep/{sleep_id}/stream"
    workout_path = f"/v2/timeseries/workouts/{workout_id}/stream"
    with freeze_time(T0):
        for path in (sleep_path, workout_path):
            assert client.get(path, headers=other_team.headers).status_code == 404
        # A workout's id is no sleep, a sleep's no workout.
        crossed = (
            f"/v2/timeseries/sleep/{workout_id}/stream",
            f"/v2/timeseries/workouts/{sleep_id}/stream",
            "/v2/timeseries/sleep/00000000-0000-4000-8000-000000000000/stream",
            "/v2/timeseries/workouts/00000000-0000-4000-8000-000000000000/stream",
        )
        for path in crossed:
            answer = client.get(path, headers=team.headers)
            assert answer.status_code == 404, path
            assert "with this id" in answer.json()["detail"]
        for kind, name in (("sleep", "sleep_id"), ("workouts", "workout_id")):
            malformed = client.get(f"/v2/timeseries/{kind}/not-a-uuid/stream", headers=team.headers)
            assert malformed.status_code == 422
            assert malformed.json()["detail"][0]["loc"] == ["path", name]


def test_a_deleted_users_sessions_are_404_and_its_erasure_deletes_the_index(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    sleep_id = summaries(client, team, oura, "sleep")[0]["id"]
    path = f"/v2/timeseries/sleep/{sleep_id}/stream"
    with service.db.read() as conn:
        held = conn.execute(
            select(func.count()).where(session_index.c.user_id == UUID(oura))
        ).scalar_one()
        row = conn.execute(
            select(session_index).where(session_index.c.session_id == UUID(sleep_id))
        ).one()
    assert held > 5
    # Sealed: neither the provider nor the resource nor the day shows in the row.
    assert b"oura" not in row.sealed and b"sleep" not in row.sealed
    assert row.team_id == team.team_id
    with freeze_time(T0):
        service.users.delete_user(CTX, team.team_id, UUID(oura))
        pending = client.get(path, headers=team.headers)
    assert pending.status_code == 404 and "scheduled for deletion" in pending.json()["detail"]
    with freeze_time(T0 + service.settings.grace_period):
        assert service.jobs.sweep_erasures() == 1
        erased = client.get(path, headers=team.headers)
    assert erased.status_code == 404
    with service.db.read() as conn:
        left = conn.execute(
            select(func.count()).where(session_index.c.user_id == UUID(oura))
        ).scalar_one()
    assert left == 0


def test_sessions_stored_before_the_index_are_indexed_at_the_start_resumably(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    sleep_id = summaries(client, team, oura, "sleep")[0]["id"]
    workout_id = summaries(client, team, oura, "workouts")[0]["id"]
    with service.db.read() as conn:
        before = conn.execute(select(session_index.c.session_id)).scalars().all()
    # As a database of before the revision: no index row, the user listed by the migration.
    with service.db.write() as conn:
        conn.execute(delete(session_index))
        conn.execute(insert(session_index_backfill), [{"user_id": UUID(oura)}])
    with freeze_time(T0):
        gone = client.get(f"/v2/timeseries/sleep/{sleep_id}/stream", headers=team.headers)
    assert gone.status_code == 404
    assert index_stored_sessions(service.db, service.key_store) == len(before)
    with service.db.read() as conn:
        after = conn.execute(select(session_index.c.session_id)).scalars().all()
        listed = conn.execute(select(func.count()).select_from(session_index_backfill))
        assert listed.scalar_one() == 0
    assert sorted(after) == sorted(before)
    assert index_stored_sessions(service.db, service.key_store) == 0  # nothing left to do
    get(client, team, f"/v2/timeseries/sleep/{sleep_id}/stream")
    get(client, team, f"/v2/timeseries/workouts/{workout_id}/stream")


def test_as_of_answers_the_session_as_stored_then(
    service: Service, client: TestClient, team: Team, oura: str
) -> None:
    sleep = summaries(client, team, oura, "sleep")[-1]
    path = f"/v2/timeseries/sleep/{sleep['id']}/stream"
    now = get(client, team, path)
    assert get(client, team, path, as_of=T0.isoformat()) == now
    # A night stored an hour later (the demo ring's night of a day after the pull):
    # unknown as of before, answered as of after.
    later_day = T0.date() + timedelta(days=2)
    night = DemoProvider().fetch(
        PullTarget(UUID(oura), "oura", "sleep", {}), later_day, later_day, T0 + timedelta(days=3), 1
    )[later_day]
    with freeze_time(T0 + timedelta(hours=1)):
        service.health_data.store(UUID(oura), "oura", {"sleep": {later_day: night}})
    later_id = str(ids_of(service, oura).summary("oura", "sleep", later_day, later_day.isoformat()))
    later = f"/v2/timeseries/sleep/{later_id}/stream"
    with freeze_time(T0 + timedelta(hours=2)):
        before = client.get(
            later, params={"as_of": (T0 + timedelta(minutes=30)).isoformat()}, headers=team.headers
        )
        after = client.get(
            later, params={"as_of": (T0 + timedelta(minutes=90)).isoformat()}, headers=team.headers
        )
        # The earlier night, as of before the later was stored: as it is now.
        earlier = client.get(
            path, params={"as_of": (T0 + timedelta(minutes=30)).isoformat()}, headers=team.headers
        )
    assert before.status_code == 404, before.text
    assert after.status_code == 200, after.text
    assert earlier.json() == now
