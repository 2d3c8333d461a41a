"""A team's source priorities (issue 34; `/v2/team/source/priorities`) on both databases:
the order it sets wins the aggregate query's buckets (after the request's own overrides),
orders the summaries of a day and the timeseries samples of an instant and the grouped
providers; a read `as_of` an instant answers that instant's order; bad orders are a clear
422; one team's order is not another's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.embedded import HealthLedger
from healthledger.domain.teams.teams import Team as TeamAggregate

from tests.conftest import Team, create_user
from tests.integration.test_aggregate_query import HEART, enable, post, stamp, tables
from tests.integration.test_summaries import DAY, T0, pulled_user

PATH = "/v2/team/source/priorities"


def same_instants(value: int) -> dict[str, Any]:
    """Four hourly heart-rate samples of yesterday, at the same instants for any provider."""
    day = datetime.now(UTC).date() - timedelta(days=1)
    moments = [datetime.combine(day, time(hour), UTC) for hour in range(8, 12)]
    return {
        "heartrate": {
            day: [{"timestamp": stamp(m), "value": value, "unit": "bpm"} for m in moments]
        }
    }


def patch(client: TestClient, team: Team, body: Any) -> Any:
    response = client.patch(PATH, json=body, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


def order_of(answer: list[dict[str, Any]], data_type: str) -> list[str]:
    found = [a for a in answer if a["data_type"] == data_type]
    assert [a["priority"] for a in found] == list(range(1, len(found) + 1))
    assert all(a["source"]["slug"] == a["provider"] for a in found)
    return [a["provider"] for a in found]


def test_the_teams_order_wins_the_buckets_and_orders_the_instants(
    service: Service, client: TestClient, team: Team
) -> None:
    enable(service, team)
    user = create_user(client, team, "priorities-1")["user_id"]
    service.health_data.store(uuid.UUID(user), "oura", same_instants(50))
    service.health_data.store(uuid.UUID(user), "withings", same_instants(70))
    mean = {"select": [{"func": "mean", "arg": HEART}, {"func": "count", "arg": HEART}]}
    day = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    series = f"/v2/timeseries/{user}/heartrate"

    def read() -> tuple[Any, list[int], list[str]]:
        (table,) = tables(post(client, team, user, [mean]))
        merged = client.get(series, params={"start_date": day}, headers=team.headers).json()
        grouped = client.get(f"{series}/grouped", params={"start_date": day}, headers=team.headers)
        return table, [s["value"] for s in merged], list(grouped.json()["groups"])

    # No order set: the catalog's order (oura before withings) and the slugs' order.
    assert read() == ({"mean": [50.0], "count": [4]}, [50, 70] * 4, ["oura", "withings"])
    answer = patch(client, team, {"timeseries": ["withings"]})
    assert order_of(answer, "timeseries") == ["withings"]
    assert read() == ({"mean": [70.0], "count": [4]}, [70, 50] * 4, ["withings", "oura"])
    # The request's own overrides come before the team's order.
    (overridden,) = tables(
        post(client, team, user, [mean], config={"provider_priority_overrides": ["oura"]})
    )
    assert overridden == {"mean": [50.0], "count": [4]}
    # An order for another kind of data leaves timeseries alone; an empty one resets.
    patch(client, team, {"sleep": ["oura"]})
    assert read()[0] == {"mean": [70.0], "count": [4]}
    assert order_of(patch(client, team, {"timeseries": []}), "timeseries") == []
    assert read() == ({"mean": [50.0], "count": [4]}, [50, 70] * 4, ["oura", "withings"])


def test_the_summaries_of_a_day_follow_the_teams_order(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user = pulled_user(service, client, team, "oura", "withings")

    def providers(resource: str, key: str, **params: Any) -> list[str]:
        with freeze_time(params.pop("at", T0)):
            response = client.get(
                f"/v2/summary/{resource}/{user}",
                params={"start_date": DAY, **params},
                headers=team.headers,
            )
        assert response.status_code == 200, response.text
        return [s["provider"] for s in response.json()[key]]

    assert providers("sleep", "sleep") == ["oura", "withings"]
    before = datetime.now(UTC)
    patch(client, team, {"sleep": ["withings", "oura"]})
    # Another team's order is its own: it changes nothing here.
    patch(client, other_team, {"sleep": ["oura"], "activity": ["oura"]})
    assert providers("sleep", "sleep") == ["withings", "oura"]
    assert providers("activity", "activity") == ["oura", "withings"]
    # As of before the change: the order of then (the data as of then too).
    later = datetime.now(UTC) + timedelta(seconds=1)
    then = providers("sleep", "sleep", as_of=before.isoformat(), at=later)
    assert then == ["oura", "withings"]
    assert providers("sleep", "sleep", as_of=later.isoformat(), at=later) == ["withings", "oura"]
    mine = client.get(PATH, headers=team.headers).json()
    assert order_of(mine, "sleep") == ["withings", "oura"] and order_of(mine, "activity") == []
    theirs = client.get(PATH, params={"data_type": "activity"}, headers=other_team.headers)
    assert [a["data_type"] for a in theirs.json()] == ["activity"]


def test_the_facade_lists_a_days_summaries_in_the_teams_order(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "oura", "withings")
    patch(client, team, {"sleep": ["withings"]})
    settings = service.settings
    with HealthLedger.open(
        settings.database_url,
        master_key_file=settings.master_key_file,
        team_id=team.team_id,
        run_scheduler=False,
    ) as ledger:
        found = ledger.summaries(user, "sleep", DAY)
        assert [s["provider"] for s in found] == ["withings", "oura"]
        assert [s["provider"] for s in ledger.summaries(user, "activity", DAY)] == [
            "oura",
            "withings",
        ]


def test_the_order_as_of_an_instant(service: Service, client: TestClient, team: Team) -> None:
    answers: list[tuple[datetime, Any]] = []
    # From now (the team was made now): an instant before it is refused.
    with freeze_time(datetime.now(UTC)) as frozen:
        for order in (["oura"], ["withings", "oura"], []):
            patch(client, team, {"body": order})
            frozen.tick(timedelta(minutes=1))
            answers.append((datetime.now(UTC), client.get(PATH, headers=team.headers).json()))
            frozen.tick(timedelta(minutes=1))
        assert [order_of(a, "body") for _, a in answers] == [["oura"], ["withings", "oura"], []]
        for instant, answer in answers:
            then = client.get(PATH, params={"as_of": instant.isoformat()}, headers=team.headers)
            assert then.json() == answer, instant
    # The change is an event on the team.
    events = service.ledger.events.get(team.team_id)
    changed = [e for e in events if isinstance(e, TeamAggregate.SourcePrioritiesChanged)]
    assert [(e.data_type, e.providers) for e in changed] == [
        ("body", ["oura"]),
        ("body", ["withings", "oura"]),
        ("body", []),
    ]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"sleep": ["oura", "not_a_maker"]}, ["body", "sleep"]),
        ({"sleep": ["oura", "oura"]}, ["body", "sleep"]),
        ({"sleep": ["Oura!"]}, ["body", "sleep", 0]),
        ({"steps": ["oura"]}, ["body", "steps"]),
        ({"sleep": "oura"}, ["body", "sleep"]),
        (None, ["body"]),
    ],
)
def test_a_bad_order_is_a_clear_422_and_changes_nothing(
    client: TestClient, team: Team, body: Any, loc: list[Any]
) -> None:
    patch(client, team, {"sleep": ["withings"]})
    response = client.patch(PATH, json=body, headers=team.headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc
    assert order_of(client.get(PATH, headers=team.headers).json(), "sleep") == ["withings"]
    bad_type = client.get(PATH, params={"data_type": "steps"}, headers=team.headers)
    assert bad_type.status_code == 422
    assert client.get(PATH).status_code == 401


def test_the_physicians_are_the_teams_own_none(
    client: TestClient, team: Team, other_team: Team
) -> None:
    mine = client.get(f"/v2/team/{team.team_id}/physicians", headers=team.headers)
    assert (mine.status_code, mine.json()) == (200, [])
    theirs = client.get(f"/v2/team/{other_team.team_id}/physicians", headers=team.headers)
    assert theirs.status_code == 404
    bad = client.get("/v2/team/not-a-team/physicians", headers=team.headers)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "team_id"]
