"""A user's refresh (issue 34; `user.refresh`) on both databases: each live connection
synced now, its historical pull still running reported as in progress, a connection in
error as failed; at most once a minute per user (429 with Retry-After); another team's
user is a 404."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.clocks import Clock
from tests.conftest import Team

CTX = CommandContext.system("test:refresh")


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    yield built
    built.close()


def test_a_refresh_syncs_each_connection_once_a_minute_at_most(
    svc: Service, clock: Clock, home: Team, api: TestClient
) -> None:
    org = svc.teams.create_organization(CTX, "Other org")
    other_id = svc.teams.create_team(CTX, org, "Other team", "us")
    other_team = Team(other_id, svc.teams.issue_team_api_key(CTX, other_id).plain)
    user = svc.users.create_user(CTX, home.team_id, client_user_id="refresh-1").id
    svc.connections.connect_demo(CTX, home.team_id, user, "oura", ["sleep", "activity"])
    svc.connections.connect_demo(
        CTX,
        home.team_id,
        user,
        "withings",
        ["body"],
        demo_failures={"body": {"code": "token_refresh_failed", "times": None}},
    )
    path = f"/v2/user/refresh/{user}"
    # Before any pull ran: the historical pulls cover the days.
    first = api.post(path, headers=home.headers)
    assert first.status_code == 200, first.text
    assert first.json()["in_progress_sources"] == ["oura", "withings"]
    svc.jobs.run_due_pulls()
    # Just pulled: too soon, by the stored sync times.
    too_soon = api.post(path, headers=home.headers)
    assert too_soon.status_code == 429, too_soon.text
    assert 1 <= int(too_soon.headers["retry-after"]) <= 60
    clock.advance(timedelta(minutes=2))
    events = svc.recorder.max_notification_id() or 0
    answer = api.post(path, params={"timeout": 20}, headers=home.headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True and body["user_id"] == str(user)
    assert body["refreshed_sources"] == ["oura"]
    assert body["failed_sources"] == ["withings"]  # its grant is broken: in error
    assert (svc.recorder.max_notification_id() or 0) > events  # the syncs were recorded
    assert api.post(path, headers=home.headers).status_code == 429
    # Another team's user, an unknown one, a bad timeout.
    assert api.post(path, headers=other_team.headers).status_code == 404
    unknown = "/v2/user/refresh/00000000-0000-4000-8000-000000000009"
    assert api.post(unknown, headers=home.headers).status_code == 404
    assert api.post(path, params={"timeout": 0}, headers=home.headers).status_code == 422
