"""The team API's team reads (`/v2/team/...`, issue 34) on both databases: another team's
id is a 404 and its users are never found; `as_of` answers what each answered then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext

from tests.conftest import Team, create_user
from tests.integration.test_orders import ADDRESS, PATIENT, WELLNESS

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext.system("test:setup")


@pytest.fixture
def team(service: Service) -> Team:
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def test_another_teams_id_and_users_are_not_found(
    client: TestClient, team: Team, other_team: Team
) -> None:
    theirs = create_user(client, other_team, "theirs-1")
    missing = client.get(f"/v2/team/{other_team.team_id}", headers=team.headers)
    assert missing.status_code == 404, missing.text
    for query in (theirs["user_id"], "theirs-1"):
        found = client.get(
            "/v2/team/users/search", params={"query_id": query}, headers=team.headers
        )
        assert (found.status_code, found.json()) == (200, [])
    mine = client.get(f"/v2/team/{team.team_id}", headers=team.headers)
    assert mine.status_code == 200 and mine.json()["id"] == str(team.team_id)
    bad = client.get("/v2/team/not-a-team", headers=team.headers)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "team_id"]


def test_the_team_and_the_search_as_of_an_instant(
    service: Service, client: TestClient, team: Team
) -> None:
    recorded: list[tuple[datetime, dict[str, Any]]] = []

    def record() -> None:
        answers = {
            "team": client.get(f"/v2/team/{team.team_id}", headers=team.headers).json(),
            "by_client_id": client.get(
                "/v2/team/users/search", params={"query_id": "tt-1"}, headers=team.headers
            ).json(),
        }
        recorded.append((datetime.now(UTC), answers))
        frozen.tick(timedelta(minutes=1))  # the next change comes after this instant

    with freeze_time(T0) as frozen:
        record()  # no user yet, the team as bootstrapped
        frozen.tick(timedelta(hours=1))
        user = create_user(client, team, "tt-1")
        frozen.tick(timedelta(hours=1))
        record()
        service.teams.set_feature(CTX, team.team_id, "portal_url", True)
        current = service.team_queries.team(team.team_id)
        assert current is not None
        service.teams.update_team(CTX, current["org_id"], team.team_id, name="Renamed", settings={})
        frozen.tick(timedelta(hours=1))
        record()
        assert client.delete(f"/v2/user/{user['user_id']}", headers=team.headers).status_code == 200
        frozen.tick(timedelta(hours=1))
        record()
        frozen.tick(timedelta(hours=1))
        assert [r[1]["team"]["name"] for r in recorded][-1] == "Renamed"
        assert recorded[0][1]["by_client_id"] == [] and recorded[-1][1]["by_client_id"] == []
        assert recorded[1][1]["by_client_id"][0]["user_id"] == user["user_id"]
        for instant, answers in recorded:
            then = {"as_of": instant.isoformat()}
            team_then = client.get(f"/v2/team/{team.team_id}", params=then, headers=team.headers)
            assert team_then.json() == answers["team"], instant
            search_then = client.get(
                "/v2/team/users/search", params={"query_id": "tt-1", **then}, headers=team.headers
            )
            assert search_then.json() == answers["by_client_id"], instant
            by_id_then = client.get(
                "/v2/team/users/search",
                params={"query_id": user["user_id"], **then},
                headers=team.headers,
            )
            assert by_id_then.json() == answers["by_client_id"], instant


def test_team_metrics_count_the_teams_live_users_connections_pulls_and_orders(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    first = create_user(client, team, "metrics-1")["user_id"]
    second = create_user(client, team, "metrics-2")["user_id"]
    gone = create_user(client, team, "metrics-3")["user_id"]
    theirs = create_user(client, other_team, "metrics-theirs")["user_id"]
    for user, provider, owner in (
        (first, "oura", team),
        (first, "freestyle_libre", team),
        (second, "oura", team),
        (gone, "oura", team),
        (theirs, "oura", other_team),
    ):
        connected = client.post(
            "/v2/link/connect/demo",
            json={"user_id": user, "provider": provider},
            headers=owner.headers,
        )
        assert connected.status_code == 200, connected.text
    assert client.delete(f"/v2/user/{gone}", headers=team.headers).status_code == 200
    service.jobs.run_due_pulls()
    placed = client.post(
        "/v3/order",
        json={
            "user_id": first,
            "lab_test_id": WELLNESS,
            "patient_details": PATIENT,
            "patient_address": ADDRESS,
        },
        headers=team.headers,
    )
    assert placed.status_code == 200, placed.text

    answer = client.get("/v2/user/metrics", headers=team.headers)
    assert answer.status_code == 200, answer.text
    metrics = answer.json()
    assert metrics["team_id"] == str(team.team_id)
    assert metrics["number_of_users"] == 2  # the deleted one is not counted
    assert metrics["number_of_connected_sources"] == 3
    assert metrics["connections_by_provider"] == {"oura": 2, "freestyle_libre": 1}
    assert metrics["number_of_ordered_tests"] == 1
    weeks = metrics["number_of_connected_sources_by_week"]
    assert len(weeks) == 12 and weeks[-1]["value"] == 3 and weeks[-1]["all"] == 3
    assert sum(metrics["pulls_by_status"].values()) >= 3
    assert set(metrics["pulls_by_status"]) <= {
        "scheduled",
        "in_progress",
        "success",
        "retrying",
        "failure",
    }
    # A connection made long before the twelve weeks counts in every week's running total.
    with freeze_time(T0):
        old = create_user(client, team, "metrics-old")["user_id"]
        client.post(
            "/v2/link/connect/demo",
            json={"user_id": old, "provider": "oura"},
            headers=team.headers,
        )
    later = client.get("/v2/user/metrics", headers=team.headers).json()
    weeks_later = later["number_of_connected_sources_by_week"]
    assert [w["all"] for w in weeks_later] == [w["all"] + 1 for w in weeks]
    assert [w["value"] for w in weeks_later] == [w["value"] for w in weeks]
    # The other team's own numbers.
    theirs_answer = client.get("/v2/user/metrics", headers=other_team.headers).json()
    assert theirs_answer["number_of_users"] == 1
    assert theirs_answer["connections_by_provider"] == {"oura": 1}
    refused = client.get("/v2/user/metrics", params={"as_of": T0.isoformat()}, headers=team.headers)
    assert refused.status_code == 422
