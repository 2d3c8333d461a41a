"""A team's lab tests (issue 14: `GET|POST /v3/lab_tests`): event-sourced creation, the
read model and its rebuild, the `LabTestLookup` port that orders read, another team's
tests, and bad input that changes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import lab_tests, stored_events
from healthledger.domain.labs.lab_tests import LabTest
from sqlalchemy import func, select

from tests.conftest import Team

DEMO_QUEST_TEST = uuid.UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01")
CREATED_TOPIC = "healthledger:LabTest.Created.v1"


def post(client: TestClient, team: Team, body: Any) -> Any:
    return client.post("/v3/lab_tests", json=body, headers=team.headers)


def create(client: TestClient, team: Team, **fields: Any) -> dict[str, Any]:
    body = {"name": "Metabolic", "method": "walk_in_test", "marker_ids": [1046], **fields}
    response = post(client, team, body)
    assert response.status_code == 200, response.text
    return response.json()


def counts(service: Service) -> tuple[int, int]:
    """(stored events, lab test rows): what a refused request must leave as it was."""
    with service.db.read() as conn:
        events = conn.execute(select(func.count()).select_from(stored_events)).scalar_one()
        rows = conn.execute(select(func.count()).select_from(lab_tests)).scalar_one()
    return events, rows


def test_a_lab_test_is_created_as_an_event_naming_its_team(
    client: TestClient, team: Team, service: Service
) -> None:
    answer = create(
        client,
        team,
        name="Annual Wellness",
        marker_ids=[1077, 1046, 1077],
        provider_ids=["7600", "496"],
        description="Metabolic panel,\nHbA1c and lipids.",
        fasting=True,
    )
    lab_test_id = uuid.UUID(answer["id"])
    assert answer["name"] == "Annual Wellness" and answer["slug"] == "annual_wellness"
    assert answer["method"] == "walk_in_test" and answer["sample_type"] == "serum"
    assert answer["lab"]["slug"] == "quest" and answer["team_id"] == str(team.team_id)
    # Each marker once, in the order given; the lab's codes after the ids.
    assert [m["id"] for m in answer["markers"]] == [1077, 1046, 1079]
    prices = sum(float(m["price"]) for m in answer["markers"])
    assert answer["price"] == pytest.approx(prices)
    assert (answer["fasting"], answer["auto_generated"], answer["status"]) == (
        True,
        False,
        "active",
    )
    with service.db.read() as conn:
        (topic, state) = conn.execute(
            select(stored_events.c.topic, stored_events.c.state).where(
                stored_events.c.originator_id == lab_test_id
            )
        ).one()
    assert topic == CREATED_TOPIC
    stored = json.loads(state)
    assert stored["team_id"]["_data_"] == team.team_id.hex
    assert (stored["lab_id"], stored["marker_ids"]) == (1, [1077, 1046, 1079])
    test = service.ledger.find(lab_test_id)
    assert isinstance(test, LabTest) and test.team_id == team.team_id


def test_the_team_lists_its_own_and_the_shared_demo_tests(
    client: TestClient, team: Team, other_team: Team
) -> None:
    mine = create(client, team, name="Mine")
    theirs = create(client, other_team, name="Theirs")
    listed = client.get("/v3/lab_tests", headers=team.headers).json()
    names = [t["name"] for t in listed]
    assert "Mine" in names and "Theirs" not in names
    demo = [t for t in listed if t["auto_generated"]]
    assert len(demo) == 4 and all(t["team_id"] is None for t in demo)
    assert [t["name"] for t in listed if not t["auto_generated"]] == ["Mine"]
    manual = client.get(
        "/v3/lab_tests", params={"generation_method": "manual"}, headers=team.headers
    )
    assert [t["id"] for t in manual.json()] == [mine["id"]]
    testkits = client.get(
        "/v3/lab_tests", params={"collection_method": "testkit"}, headers=team.headers
    )
    assert {t["lab"]["slug"] for t in testkits.json()} == {"zrt", "molecular_testing_labs"}
    by_code = client.get(
        "/v3/lab_tests", params={"provider_ids": ["496"], "lab_slug": "quest"}, headers=team.headers
    )
    assert {t["name"] for t in by_code.json()} == {"Mine", "Annual Wellness (Quest, walk-in)"}
    by_price = client.get(
        "/v3/lab_tests",
        params={"order_key": "price", "order_direction": "desc"},
        headers=team.headers,
    ).json()
    assert [t["price"] for t in by_price] == sorted((t["price"] for t in by_price), reverse=True)
    # One test at a time: the team's own, a demo one; another team's is a 404.
    assert client.get(f"/v3/lab_tests/{mine['id']}", headers=team.headers).json() == mine
    demo_one = client.get(f"/v3/lab_tests/{DEMO_QUEST_TEST}", headers=team.headers)
    assert demo_one.status_code == 200 and demo_one.json()["auto_generated"] is True
    other = client.get(f"/v3/lab_tests/{theirs['id']}", headers=team.headers)
    assert other.status_code == 404
    assert other.json()["detail"] == f"Unknown lab test ids: {theirs['id']}."
    assert client.get("/v3/lab_tests/not-a-uuid", headers=team.headers).status_code in (404, 422)
    paged = client.get(
        f"/v3/lab_tests/{mine['id']}/markers", params={"size": 1}, headers=team.headers
    )
    assert paged.json()["markers"][0]["id"] == 1046 and paged.json()["total"] == 1


def test_the_lookup_port_finds_the_teams_and_the_demo_tests_only(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    mine = uuid.UUID(create(client, team, marker_ids=[2001], method="at_home_phlebotomy")["id"])
    view = service.lab_tests.lab_test(team.team_id, mine)
    assert view is not None
    assert (view.team_id, view.lab_id, view.method, view.marker_ids) == (
        team.team_id,
        2,
        "at_home_phlebotomy",
        (2001,),
    )
    assert service.lab_tests.lab_test(other_team.team_id, mine) is None
    assert service.lab_tests.lab_test(team.team_id, uuid.uuid4()) is None
    demo = service.lab_tests.lab_test(other_team.team_id, DEMO_QUEST_TEST)
    assert demo is not None and demo.team_id is None and demo.lab_id == 1


def test_the_read_model_is_rebuilt_from_the_log(
    client: TestClient, team: Team, service: Service
) -> None:
    create(client, team, name="One")
    create(client, team, name="Two", marker_ids=[5001], method="testkit")
    with service.db.read() as conn:
        before = conn.execute(select(lab_tests).order_by(lab_tests.c.name)).all()
        conn.rollback()
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    with service.db.read() as conn:
        after = conn.execute(select(lab_tests).order_by(lab_tests.c.name)).all()
    assert after == before and len(after) == 2


# (body, status, detail): each over a good body, refused, and nothing stored.
BAD_LAB_TESTS: list[tuple[dict[str, Any], int, str | None]] = [
    ({"marker_ids": [1001, 2001]}, 422, "The markers are of 2 labs (1, 2)"),
    ({"marker_ids": [5001], "method": "walk_in_test"}, 422, "ZRT Laboratory does not offer"),
    ({"marker_ids": [4001], "method": "at_home_phlebotomy"}, 422, "does not offer"),
    ({"marker_ids": [1001, 99, 98, 99]}, 404, "Unknown marker ids: 99, 98."),
    ({"marker_ids": [1001], "provider_ids": ["NOPE"]}, 404, "Unknown provider_ids of quest"),
    ({"marker_ids": [], "provider_ids": ["496"]}, 422, "give marker_ids too"),
    ({"marker_ids": []}, 422, "at least one marker"),
    ({"marker_ids": None}, 422, "at least one marker"),
    ({"method": "on_site_collection"}, 422, None),
    ({"method": "mail"}, 422, None),
    ({"name": ""}, 422, None),
    ({"name": "x" * 256}, 422, None),
    ({"name": "bell\u0007"}, 422, None),
    ({"marker_ids": ["one"]}, 422, None),
    ({"marker_ids": list(range(1001, 1102))}, 422, None),
    ({"provider_ids": ["has space"]}, 422, None),
    ({"description": "d" * 2001}, 422, None),
    ({"colour": "red"}, 422, None),
]


def test_bad_lab_tests_are_refused_and_change_nothing(
    client: TestClient, team: Team, service: Service
) -> None:
    # Refusals change nothing: every case against the one service, each checked against
    # the counts before the first.
    before = counts(service)
    for body, status, detail in BAD_LAB_TESTS:
        case = body
        full = {"name": "Bad", "method": "walk_in_test", "marker_ids": [1001], **body}
        response = post(client, team, full)
        assert response.status_code == status, (case, response.text)
        if detail is not None:
            found = response.json()["detail"]
            message = found if isinstance(found, str) else found[0]["msg"]
            assert detail in message, (case, message)
        assert counts(service) == before, case


def test_malformed_and_oversized_bodies_change_nothing(
    client: TestClient, team: Team, service: Service
) -> None:
    before = counts(service)
    malformed = client.post(
        "/v3/lab_tests",
        content=b'{"name": "x", ',
        headers={**team.headers, "content-type": "application/json"},
    )
    assert malformed.status_code == 422
    huge = post(client, team, {"name": "Big", "method": "testkit", "description": "x" * 2_000_000})
    assert huge.status_code == 413
    assert client.post("/v3/lab_tests", json={"name": "x"}).status_code == 401
    assert counts(service) == before


def test_as_of_answers_the_lab_tests_the_team_had_then(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    """The listing (filters and order included), each test and its markers, recorded
    after each creation and answered again by `as_of`; a test not created yet then is
    a 404. The shared demo tests are reference data: in every answer, as now."""
    queries: list[dict[str, Any]] = [
        {},
        {"generation_method": "manual"},
        {"order_key": "created_at", "order_direction": "desc"},
        {"marker_ids": [1046]},
        {"name": "panel"},
    ]
    made: list[str] = []
    recorded: list[tuple[datetime, list[Any], dict[str, tuple[Any, Any]]]] = []

    def record() -> None:
        lists = []
        for query in queries:
            response = client.get("/v3/lab_tests", params=query, headers=team.headers)
            assert response.status_code == 200, response.text
            lists.append(response.json())
        each = {}
        for test in [*made, str(DEMO_QUEST_TEST)]:
            one = client.get(f"/v3/lab_tests/{test}", headers=team.headers)
            markers = client.get(
                f"/v3/lab_tests/{test}/markers", params={"size": 2}, headers=team.headers
            )
            assert one.status_code == markers.status_code == 200
            each[test] = (one.json(), markers.json())
        recorded.append((datetime.now(UTC), lists, each))

    start = datetime.now(UTC) + timedelta(days=1)  # after the team's creation
    with freeze_time(start) as frozen:
        record()
        for name, markers in (("Lipid panel", [1046]), ("Thyroid", [1077]), ("Panel B", [1046])):
            frozen.tick(timedelta(hours=1))
            made.append(create(client, team, name=name, marker_ids=markers)["id"])
            record()
        # Another team's test changes none of the answers.
        frozen.tick(timedelta(hours=1))
        create(client, other_team, name="Other panel")
        frozen.tick(timedelta(hours=1))
        for instant, lists, each in recorded:
            at = {"as_of": instant.isoformat()}
            for query, answer in zip(queries, lists, strict=True):
                past = client.get("/v3/lab_tests", params={**query, **at}, headers=team.headers)
                assert past.status_code == 200 and past.json() == answer, (instant, query)
            for test in [*made, str(DEMO_QUEST_TEST)]:
                one = client.get(f"/v3/lab_tests/{test}", params=at, headers=team.headers)
                markers = client.get(
                    f"/v3/lab_tests/{test}/markers",
                    params={**at, "size": 2},
                    headers=team.headers,
                )
                if test in each:
                    assert (one.json(), markers.json()) == each[test], (instant, test)
                else:  # not created yet then
                    assert one.status_code == markers.status_code == 404, (instant, test)
        # The other team's test is its own, never the team's.
        now = {"as_of": datetime.now(UTC).isoformat()}
        other = client.get("/v3/lab_tests", params=now, headers=other_team.headers).json()
        assert [t["name"] for t in other if not t["auto_generated"]] == ["Other panel"]
        stranger = client.get(f"/v3/lab_tests/{other[-1]['id']}", params=now, headers=team.headers)
        assert stranger.status_code == 404
        future = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
        assert (
            client.get("/v3/lab_tests", params={"as_of": future}, headers=team.headers).status_code
            == 422
        )
