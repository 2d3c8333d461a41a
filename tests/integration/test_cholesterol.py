"""The cholesterol fractions (`GET /v2/timeseries/{user_id}/cholesterol/{fraction}`, the
official client's `vitals.cholesterol_*`): the stored cholesterol samples of that `type`,
of several providers merged or of one, as they were at `as_of`; `.../cholesterol/grouped`
stays the generic grouped read. On both databases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.http.cholesterol import FRACTIONS

from tests.conftest import Team, create_user

T0 = datetime(2026, 3, 10, 12, tzinfo=UTC)
DAY = date(2026, 3, 2)
NEXT = DAY + timedelta(days=1)
RANGE = {"start_date": DAY.isoformat(), "end_date": NEXT.isoformat()}


@pytest.fixture
def team(service: Service) -> Team:
    # Made before every instant the tests travel to (an instant before the team is a 422).
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def panel(day: date, hour: int, shift: float) -> list[dict[str, Any]]:
    """A lipid panel's samples at one instant: one per fraction, in mmol/L."""
    moment = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=hour)
    values = {"total": 5.1, "ldl": 3.0, "hdl": 1.4, "triglycerides": 1.2}
    return [
        {
            "timestamp": moment.isoformat(),
            "value": round(value + shift, 2),
            "unit": "mmol/L",
            "type": kind,
        }
        for kind, value in values.items()
    ]


def stored_user(service: Service, client: TestClient, team: Team) -> UUID:
    with freeze_time(T0):
        user = UUID(create_user(client, team, "cholesterol")["user_id"])
    with freeze_time(T0 + timedelta(hours=1)):
        service.health_data.store(
            user,
            "withings",
            {"cholesterol": {DAY: panel(DAY, 8, 0), NEXT: panel(NEXT, 8, 0.1)}},
        )
        service.health_data.store(
            user, "apple_health_kit", {"cholesterol": {DAY: panel(DAY, 9, 0.3)}}
        )
    return user


def read(client: TestClient, team: Team, path: str, **params: str) -> Any:
    with freeze_time(T0 + timedelta(days=1)):
        response = client.get(path, params={**RANGE, **params}, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_each_fraction_is_the_cholesterol_samples_of_its_type(
    service: Service, client: TestClient, team: Team
) -> None:
    user = stored_user(service, client, team)
    every = read(client, team, f"/v2/timeseries/{user}/cholesterol")
    assert len(every) == 12
    for fraction in FRACTIONS:
        found = read(client, team, f"/v2/timeseries/{user}/cholesterol/{fraction}")
        assert found == [s for s in every if s["type"] == fraction]
        # Both providers merged in time order: withings on DAY, apple on DAY, withings NEXT.
        assert [s["timestamp"][:13] for s in found] == [
            "2026-03-02T08",
            "2026-03-02T09",
            "2026-03-03T08",
        ]
        of_one = read(
            client, team, f"/v2/timeseries/{user}/cholesterol/{fraction}", provider="withings"
        )
        assert of_one == [found[0], found[2]]
    assert [s["value"] for s in read(client, team, f"/v2/timeseries/{user}/cholesterol/hdl")] == [
        1.4,
        1.7,
        1.5,
    ]
    # `grouped` is still the generic grouped read, not a fraction.
    grouped = read(client, team, f"/v2/timeseries/{user}/cholesterol/grouped")
    assert set(grouped["groups"]) == {"withings", "apple_health_kit"}


def test_a_fraction_as_it_was_at_an_instant(
    service: Service, client: TestClient, team: Team
) -> None:
    user = stored_user(service, client, team)
    with freeze_time(T0 + timedelta(hours=3)):
        service.health_data.store(user, "withings", {"cholesterol": {DAY: panel(DAY, 8, -0.5)}})
    path = f"/v2/timeseries/{user}/cholesterol/ldl"
    now = read(client, team, path, provider="withings")
    before = read(
        client, team, path, provider="withings", as_of=(T0 + timedelta(hours=2)).isoformat()
    )
    assert [s["value"] for s in now] == [2.5, 3.1]
    assert [s["value"] for s in before] == [3.0, 3.1]
    # Before anything was stored: none.
    assert read(client, team, path, as_of=(T0 + timedelta(minutes=30)).isoformat()) == []


def test_bad_input_and_other_teams(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user = stored_user(service, client, team)
    with freeze_time(T0 + timedelta(days=1)):
        for fraction, params, status in [
            ("ldl_calc", RANGE, 404),  # no such fraction: no such path
            ("hdl", {}, 422),
            ("hdl", {**RANGE, "provider": "nope"}, 422),
        ]:
            response = client.get(
                f"/v2/timeseries/{user}/cholesterol/{fraction}", params=params, headers=team.headers
            )
            assert response.status_code == status, response.text
            assert response.json()["detail"]
        other = client.get(
            f"/v2/timeseries/{user}/cholesterol/hdl", params=RANGE, headers=other_team.headers
        )
        assert other.status_code == 404
