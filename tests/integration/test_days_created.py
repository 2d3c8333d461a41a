"""A sync's count of created days counts days, not sessions (issue 29 §1).

A resource kept as sessions (workouts, meals) is recorded one `DailySynced` per new or
changed session; its `days_created` (in clear: what the deletion report sums once the
days themselves are gone with the key) counts the day it created once, by the day's
first new session, and a new session on a day held before counts none. The deletion
report's `days_with_data_recorded` then says how many days with data were stored: the
days the store holds now. On both databases.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.connections.sessions import SessionChange, days_created_by

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DAYS_SYNCED = 24


def test_days_created_counts_each_new_day_once_whatever_its_sessions() -> None:
    day, held, other = date(2026, 3, 1), date(2026, 2, 27), date(2026, 3, 2)
    changes = [
        SessionChange(held, "held-2", created=True),  # a new session of a day held before
        SessionChange(day, "a", created=True),
        SessionChange(day, "b", created=True),  # the same new day: counted already
        SessionChange(held, "held-1", created=False),
        SessionChange(other, "c", created=True),
    ]
    assert days_created_by(changes, [day, other]) == [0, 1, 0, 0, 1]
    assert days_created_by([], [day]) == []


@pytest.fixture
def team(service: Service) -> Team:
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def test_the_deletion_report_counts_the_days_a_daily_sync_of_sessions_created(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0) as frozen:
        # A demo device's sessions follow from the user's id, and one day in six holds
        # two: a user whose synced days hold none (1 in 80) would test nothing, so the
        # test takes the first user the device gives such a day.
        for number in range(20):
            user = str(create_user(client, team, f"sessions-{number}")["user_id"])
            if has_a_synced_day_of_two_workouts(user):
                break
        else:
            pytest.fail("no user of 20 had a synced day of two workouts")
        connect(client, team, user, "oura")
        service.jobs.run_due_pulls()
        pulled_until = T0.date()
        # Day after day, the daily sync finds the new days' workouts (up to two a day).
        for _ in range(DAYS_SYNCED):
            frozen.tick(timedelta(days=1))
            service.jobs.sync_connected_feeds()
        now = datetime.now(UTC)
        workouts = client.get(
            f"/v2/summary/workouts/{user}",
            params={
                "start_date": str(pulled_until - timedelta(days=40)),
                "end_date": str(now.date()),
            },
            headers=team.headers,
        )
        report = client.get(f"/v2/audit/user/{user}/deletion_report", headers=team.headers)
    assert workouts.status_code == 200 and report.status_code == 200, report.text
    per_day = Counter(w["calendar_date"] for w in workouts.json()["workouts"])
    synced_days = {d for d in per_day if date.fromisoformat(d) > pulled_until}
    # What makes the count matter: a synced day with two sessions (two events, one day).
    assert [d for d in synced_days if per_day[d] == 2], per_day
    feeds = [f for f in health_data_of(report.json()) if f["resource"] == "workouts"]
    assert len(feeds) == 1
    # The days recorded (the history's, then each sync's new ones): the days held now.
    assert feeds[0]["days_with_data_recorded"] == feeds[0]["rows_now"]


def has_a_synced_day_of_two_workouts(user: str) -> bool:
    """Whether the demo device gives `user` two workouts on a day the syncs bring."""
    first = T0.date() + timedelta(days=1)
    target = PullTarget(UUID(user), "oura", "workouts", {})
    found = DemoProvider().fetch(
        target, first, first + timedelta(days=DAYS_SYNCED - 2), T0 + timedelta(DAYS_SYNCED), 1
    )
    return any(len(sessions) == 2 for sessions in found.values())


def health_data_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's per-feed health data entries, wherever the report's version puts
    them."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "days_with_data_recorded" in value:
                found.append(value)
            else:
                for item in value.values():
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(report)
    return found
