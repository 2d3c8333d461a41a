"""`as_of` on the summaries, timeseries and aggregate reads (issue 29 §3, issue 32; ADR
0033's versions of a block), on SQLite and PostgreSQL: answers recorded at several
instants while syncs add days and change stored ones are answered again by `as_of` each
instant; an instant before the user existed is a 404, and one whose version of the data
compaction dropped a 422 that says so."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.health_data.store import COMPACTED, KEPT_VERSIONS
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.context import CommandContext

from tests.conftest import Team, create_user

T0 = datetime(2026, 3, 10, 12, tzinfo=UTC)
DAY = date(2026, 3, 2)
NEXT = DAY + timedelta(days=1)
START = {"start_date": DAY.isoformat(), "end_date": NEXT.isoformat()}
CTX = CommandContext.system("test:as-of")
READS = (
    "/v2/summary/sleep/{user}",
    "/v2/timeseries/{user}/heartrate",
    "/v2/timeseries/{user}/heartrate/grouped",
)


@pytest.fixture
def team(service: Service) -> Team:
    # Made before every instant the tests travel to (an instant before the team is a 422).
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture(autouse=True)
def routes_built(client: TestClient, team: Team) -> None:
    """Each read asked once before the tests freeze time: the app builds a route's
    parameters at its first request, and under freezegun `datetime` (as_of's type) is
    its fake class, which is no type a route's parameter can have."""
    for path in (*READS, "/v2/summary/profile/{user}"):
        client.get(path.format(user=uuid4()), params=START, headers=team.headers)
    client.post(f"/aggregate/v1/user/{uuid4()}/query", json={}, headers=team.headers)


def heart_rate(day: date, value: int) -> list[dict[str, Any]]:
    start = datetime.combine(day, datetime.min.time(), UTC)
    return [
        {"timestamp": (start + timedelta(minutes=m)).isoformat(), "value": value + m, "unit": "bpm"}
        for m in range(5)
    ]


def sleep(user: UUID, day: date, score: int) -> dict[str, Any]:
    found = DemoProvider().fetch(PullTarget(user, "oura", "sleep", {}), day, day, T0, 1)[day]
    changed = copy.deepcopy(found)
    changed["score"] = score
    return dict(changed)


def answers(client: TestClient, team: Team, user: UUID, **params: str) -> list[Any]:
    found = []
    for path in READS:
        response = client.get(
            path.format(user=user), params={**START, **params}, headers=team.headers
        )
        assert response.status_code == 200, (path, response.text)
        found.append(response.json())
    return found


def test_summaries_and_timeseries_answer_as_of_each_instant_what_they_answered_then(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = UUID(create_user(client, team, "as-of-health")["user_id"])
    store = service.health_data.store
    steps = [
        # The first day stored; the next day added (its block's version written in
        # place); the first day changed (a new version, the earlier one kept); the next
        # day changed too; then the first day again.
        {DAY: (60, 80)},
        {DAY: (60, 80), NEXT: (62, 85)},
        {DAY: (70, 81), NEXT: (62, 85)},
        {NEXT: (64, 90)},
        {DAY: (75, 82)},
    ]
    recorded: list[tuple[datetime, list[Any]]] = []
    with freeze_time(T0 + timedelta(minutes=1)):
        recorded.append((T0 + timedelta(minutes=1), answers(client, team, user)))
    for n, step in enumerate(steps):
        at = T0 + timedelta(hours=n + 1)
        with freeze_time(at):
            store(
                user,
                "oura",
                {
                    "heartrate": {day: heart_rate(day, hr) for day, (hr, _) in step.items()},
                    "sleep": {day: sleep(user, day, score) for day, (_, score) in step.items()},
                },
            )
        later = at + timedelta(minutes=30)
        with freeze_time(later):
            recorded.append((later, answers(client, team, user)))
    # The recorded answers differ from each other: each step changed what is read.
    assert len({repr(answer) for _, answer in recorded}) == len(recorded)
    assert recorded[0][1][0] == {"sleep": []} and recorded[0][1][1] == []

    with freeze_time(T0 + timedelta(days=1)):
        for at, answered in recorded:
            assert answers(client, team, user, as_of=at.isoformat()) == answered, at
        # Without as_of: the present, which is the last step's.
        assert answers(client, team, user) == recorded[-1][1]
        # An instant before the user existed: the user is unknown then.
        before = client.get(
            f"/v2/summary/sleep/{user}",
            params={**START, "as_of": (T0 - timedelta(hours=1)).isoformat()},
            headers=team.headers,
        )
        assert before.status_code == 404, before.text
        profile = client.get(
            f"/v2/summary/profile/{user}",
            params={"as_of": (T0 + timedelta(minutes=1)).isoformat()},
            headers=team.headers,
        )
        assert profile.status_code == 404  # none stored then (nor now)


def test_an_instant_whose_version_compaction_dropped_is_a_422(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = UUID(create_user(client, team, "as-of-compacted")["user_id"])
    instants = []
    for n in range(KEPT_VERSIONS + 3):
        with freeze_time(T0 + timedelta(hours=n + 1)):
            service.health_data.store(user, "oura", {"heartrate": {DAY: heart_rate(DAY, 50 + n)}})
        instants.append(T0 + timedelta(hours=n + 1, minutes=30))
    path = f"/v2/timeseries/{user}/heartrate"
    with freeze_time(T0 + timedelta(days=1)):

        def read(at: datetime) -> Any:
            return client.get(path, params={**START, "as_of": at.isoformat()}, headers=team.headers)

        # Versions 1 and 2 were dropped (the current one and 8 earlier are kept); with
        # the first went when the block was made, so an instant before it is refused too.
        for at in [T0 + timedelta(minutes=30), *instants[:2]]:
            response = read(at)
            assert response.status_code == 422, response.text
            (problem,) = response.json()["detail"]
            assert (problem["loc"], problem["msg"]) == (["query", "as_of"], COMPACTED)
        for n, at in enumerate(instants[2:], start=2):
            response = read(at)
            assert response.status_code == 200, response.text
            assert [s["value"] for s in response.json()] == [50 + n + m for m in range(5)]


def test_the_aggregate_query_answers_as_of_each_instant_what_it_answered_then(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = UUID(create_user(client, team, "as-of-aggregate")["user_id"])
        service.teams.set_feature(CTX, team.team_id, "aggregate_query", True)
    body = {
        "timeframe": {
            "type": "relative",
            "anchor": NEXT.isoformat(),
            "past": {"value": 7, "unit": "day"},
        },
        "queries": [
            {
                "select": [
                    {"group_key": 0},
                    {"func": "mean", "arg": {"timeseries": "heartrate", "field": "value"}},
                    {"func": "count", "arg": {"timeseries": "heartrate", "field": "value"}},
                ],
                "group_by": [
                    {"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}}
                ],
            }
        ],
    }

    def answer(**params: str) -> Any:
        response = client.post(
            f"/aggregate/v1/user/{user}/query", json=body, params=params, headers=team.headers
        )
        assert response.status_code == 200, response.text
        return response.json()["results"]

    steps = [{DAY: 60}, {NEXT: 62}, {DAY: 70}, {DAY: 75, NEXT: 64}]
    recorded = []
    for n, step in enumerate(steps):
        with freeze_time(T0 + timedelta(hours=n + 1)):
            service.health_data.store(
                user, "oura", {"heartrate": {day: heart_rate(day, hr) for day, hr in step.items()}}
            )
        later = T0 + timedelta(hours=n + 1, minutes=30)
        with freeze_time(later):
            recorded.append((later, answer()))
    assert len({repr(found) for _, found in recorded}) == len(recorded)
    with freeze_time(T0 + timedelta(days=1)):
        for at, answered in recorded:
            assert answer(as_of=at.isoformat()) == answered, at
        before = client.post(
            f"/aggregate/v1/user/{user}/query",
            json=body,
            params={"as_of": (T0 - timedelta(hours=1)).isoformat()},
            headers=team.headers,
        )
        assert before.status_code == 404, before.text
