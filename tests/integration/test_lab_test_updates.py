"""A team's lab test renamed, taken out of use and put back (issue 33's `update_lab_test`,
`PATCH /v3/lab_tests/{lab_test_id}`): the `LabTest.Updated` event and its audit, the read
model and every answer that shows a lab test, its rebuild, `as_of`, the refusals (bad
bodies, another team's test, a shared demo test) that record nothing, and an inactive
test refusing new orders while the orders placed with it go on."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.audit import stream_history
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import lab_tests, stored_events
from healthledger.domain.labs.lab_tests import LabTest
from sqlalchemy import func, select

from tests.conftest import Team, create_user
from tests.integration import test_todays_main
from tests.integration.test_lab_tests import DEMO_QUEST_TEST, counts, create
from tests.integration.test_orders import ADDRESS, PATIENT
from tests.integration.test_todays_main import Written

UPDATED_TOPIC = "healthledger:LabTest.Updated.v1"


def patch(client: TestClient, team: Team, lab_test_id: str, body: Any, **headers: str) -> Any:
    return client.patch(
        f"/v3/lab_tests/{lab_test_id}", json=body, headers={**team.headers, **headers}
    )


def updated(client: TestClient, team: Team, lab_test_id: str, **body: Any) -> dict[str, Any]:
    response = patch(client, team, lab_test_id, body)
    assert response.status_code == 200, response.text
    return response.json()


def topics(service: Service, lab_test_id: str) -> list[str]:
    with service.db.read() as conn:
        return list(
            conn.execute(
                select(stored_events.c.topic)
                .where(stored_events.c.originator_id == uuid.UUID(lab_test_id))
                .order_by(stored_events.c.originator_version)
            ).scalars()
        )


def order(client: TestClient, team: Team, user_id: str, lab_test_id: str, **extra: Any) -> Any:
    body = {
        "user_id": user_id,
        "lab_test_id": lab_test_id,
        "patient_details": PATIENT,
        "patient_address": ADDRESS,
    }
    return client.post("/v3/order", json=body, headers={**team.headers, **extra})


def test_a_lab_test_is_renamed_deactivated_and_reactivated_as_events_of_its_stream(
    client: TestClient, team: Team, service: Service
) -> None:
    made = create(client, team, name="Metabolic", fasting=True)
    test_id = made["id"]

    renamed = updated(client, team, test_id, name="Metabolic (fasting)")
    assert renamed == {**made, "name": "Metabolic (fasting)", "slug": "metabolic_fasting"}
    off = updated(client, team, test_id, active=False)
    assert (off["is_active"], off["status"], off["name"]) == (False, "inactive", renamed["name"])
    # Both at once, and the answer is what every read answers from now on.
    both = updated(client, team, test_id, name="Metabolic v2", active=True)
    assert (both["name"], both["is_active"], both["status"]) == ("Metabolic v2", True, "active")
    # The markers, lab, method, price and creation never change.
    keep = ("markers", "lab", "method", "price", "fasting", "created_at", "team_id", "id")
    assert {k: both[k] for k in keep} == {k: made[k] for k in keep}

    # The same values again record nothing and answer the test as it is.
    assert updated(client, team, test_id, name="Metabolic v2", active=True) == both
    assert topics(service, test_id) == ["healthledger:LabTest.Created.v1", *[UPDATED_TOPIC] * 3]
    with service.db.read() as conn:
        states = conn.execute(
            select(stored_events.c.state)
            .where(
                stored_events.c.originator_id == uuid.UUID(test_id),
                stored_events.c.topic == UPDATED_TOPIC,
            )
            .order_by(stored_events.c.originator_version)
        ).scalars()
        recorded = [json.loads(state) for state in states]
    assert [(r["name"], r["active"]) for r in recorded] == [
        ("Metabolic (fasting)", True),
        ("Metabolic (fasting)", False),
        ("Metabolic v2", True),
    ]
    aggregate = service.ledger.find(uuid.UUID(test_id))
    assert isinstance(aggregate, LabTest) and (aggregate.name, aggregate.active) == (
        "Metabolic v2",
        True,
    )

    # Every answer that shows a lab test: one, the list, the paginated list.
    updated(client, team, test_id, active=False)
    one = client.get(f"/v3/lab_tests/{test_id}", headers=team.headers).json()
    listed = client.get("/v3/lab_tests", headers=team.headers).json()
    paged = client.get("/v3/lab_test", params={"lab_test_limit": 100}, headers=team.headers)
    assert (one["is_active"], one["status"], one["name"]) == (False, "inactive", "Metabolic v2")
    assert [t for t in listed if t["id"] == test_id] == [one]
    assert [t for t in paged.json()["data"] if t["id"] == test_id] == [one]
    by_status = {
        status: [
            t["id"]
            for t in client.get(
                "/v3/lab_tests", params={"status": status}, headers=team.headers
            ).json()
        ]
        for status in ("active", "inactive", "pending_approval")
    }
    assert by_status["inactive"] == [test_id] and by_status["pending_approval"] == []
    assert test_id not in by_status["active"] and str(DEMO_QUEST_TEST) in by_status["active"]


def test_the_audit_names_who_changed_it_and_the_read_model_is_rebuilt_from_the_log(
    client: TestClient, team: Team, service: Service
) -> None:
    test_id = create(client, team, name="One")["id"]
    create(client, team, name="Two", marker_ids=[5001], method="testkit")
    response = patch(
        client, team, test_id, {"name": "Uno", "active": False}, **{"x-request-id": "req-rename-42"}
    )
    assert response.status_code == 200, response.text

    entries = stream_history(service, uuid.UUID(test_id))
    assert [e.event for e in entries] == ["LabTest.Created", "LabTest.Updated"]
    created, change = entries
    assert change.request_id == "req-rename-42" and change.actor == created.actor
    # The team API key that changed it (the one that made it).
    assert change.actor.startswith("team_api_key:")
    assert (change.changes["name"], change.changes["active"]) == ("Uno", False)
    assert change.stream_kind == "lab_test" and change.stream_id == uuid.UUID(test_id)

    with service.db.read() as conn:
        before = conn.execute(select(lab_tests).order_by(lab_tests.c.name)).all()
        conn.rollback()
    row = next(r for r in before if str(r.lab_test_id) == test_id)
    assert (row.name, row.active) == ("Uno", False) and row.updated_at > row.created_at
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    with service.db.read() as conn:
        after = conn.execute(select(lab_tests).order_by(lab_tests.c.name)).all()
    assert after == before and len(after) == 2


# (body, what the message says): each refused with a 422, and nothing stored.
BAD_UPDATES: list[tuple[Any, str | None]] = [
    ({}, "nothing to change"),
    ({"name": None, "active": None}, "nothing to change"),
    ({"name": ""}, None),
    ({"name": "   "}, "must not be blank"),
    ({"name": "x" * 256}, None),
    ({"name": "bell\u0007"}, "control characters"),
    ({"name": "right\u202eleft"}, "control characters"),
    ({"name": 42}, None),
    ({"active": "maybe"}, None),
    ({"active": True, "method": "testkit"}, None),
    ({"marker_ids": [1001]}, None),
    ([], None),
    (None, None),
]


def test_bad_updates_are_refused_with_a_clear_422_and_change_nothing(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    test_id = create(client, team)["id"]
    theirs = create(client, other_team, name="Theirs")["id"]
    before = counts(service)
    for body, message in BAD_UPDATES:
        response = patch(client, team, test_id, body)
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"]
        assert isinstance(detail, list) and detail[0]["loc"][0] == "body", (body, detail)
        if message is not None:
            assert message in detail[0]["msg"], (body, detail)
        assert counts(service) == before, body
    malformed = client.patch(
        f"/v3/lab_tests/{test_id}",
        content=b'{"name": ',
        headers={**team.headers, "content-type": "application/json"},
    )
    assert malformed.status_code == 422

    # Another team's test and an unknown id: the same 404; a non-UUID never a 500.
    for unknown in (theirs, str(uuid.uuid4())):
        response = patch(client, team, unknown, {"active": False})
        assert response.status_code == 404, response.text
        assert response.json()["detail"] == f"Unknown lab test ids: {unknown}."
    assert patch(client, team, "not-a-uuid", {"active": False}).status_code in (404, 422)
    # A shared demo test is every team's to order and no team's to change.
    shared = patch(client, team, str(DEMO_QUEST_TEST), {"name": "Mine now"})
    assert shared.status_code == 403 and "shared demo test" in shared.json()["detail"]
    assert client.patch(f"/v3/lab_tests/{test_id}", json={"active": False}).status_code == 401
    assert counts(service) == before
    # The other team's test is as it was.
    theirs_now = client.get(f"/v3/lab_tests/{theirs}", headers=other_team.headers).json()
    assert (theirs_now["name"], theirs_now["is_active"]) == ("Theirs", True)


def test_an_inactive_lab_test_refuses_new_orders_and_keeps_those_placed(
    client: TestClient, team: Team, service: Service
) -> None:
    test_id = create(client, team, name="Walk-in HbA1c")["id"]
    user_id = create_user(client, team, "inactive-orders")["user_id"]
    placed = order(client, team, user_id, test_id, **{"X-Idempotency-Key": "first"})
    assert placed.status_code == 200, placed.text
    first = placed.json()["order"]

    updated(client, team, test_id, name="Renamed after the order", active=False)
    events_before = counts(service)[0]
    refused = order(client, team, user_id, test_id)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        f"Lab test {test_id} is inactive: it takes no new orders until its team makes it "
        "active again (update it with active true)."
    )
    imported = client.post(
        "/v3/order/import",
        json={
            "user_id": user_id,
            "billing_type": "client_bill",
            "order_set": {"lab_test_ids": [test_id]},
            "collection_method": "walk_in_test",
            "patient_details": PATIENT,
            "patient_address": ADDRESS,
            "sample_id": "EXT-1",
        },
        headers=team.headers,
    )
    assert imported.status_code == 409 and "is inactive" in imported.json()["detail"]
    assert counts(service)[0] == events_before

    # The order placed before: its test as it was ordered, its idempotent answer the
    # same, and it still moves on.
    again = order(client, team, user_id, test_id, **{"X-Idempotency-Key": "first"})
    assert again.status_code == 200 and again.json()["order"]["id"] == first["id"]
    now = client.get(f"/v3/order/{first['id']}", headers=team.headers).json()
    assert now["lab_test"]["name"] == "Walk-in HbA1c"
    stepped = client.post(f"/v3/order/{first['id']}/test", headers=team.headers)
    assert stepped.status_code == 200, stepped.text

    # Active again: it takes orders again.
    updated(client, team, test_id, active=True)
    placed_again = order(client, team, user_id, test_id)
    assert placed_again.status_code == 200, placed_again.text
    assert placed_again.json()["order"]["lab_test"]["name"] == "Renamed after the order"


def test_as_of_answers_the_name_and_state_the_test_had_then(
    client: TestClient, team: Team, service: Service
) -> None:
    """One test, the list and the listing ordered by `updated_at`, recorded after each
    change and answered again by `as_of`."""
    start = datetime.now(UTC) + timedelta(days=1)  # after the team's creation
    recorded: list[tuple[datetime, Any, Any, Any]] = []

    def record(test_id: str) -> None:
        one = client.get(f"/v3/lab_tests/{test_id}", headers=team.headers).json()
        listed = client.get("/v3/lab_tests", headers=team.headers).json()
        newest = client.get(
            "/v3/lab_tests",
            params={"order_key": "updated_at", "order_direction": "desc"},
            headers=team.headers,
        ).json()
        recorded.append((datetime.now(UTC), one, listed, newest))

    with freeze_time(start) as frozen:
        first = create(client, team, name="First")["id"]
        frozen.tick(timedelta(hours=1))
        second = create(client, team, name="Second")["id"]
        record(first)
        for change in ({"name": "First, renamed"}, {"active": False}, {"active": True}):
            frozen.tick(timedelta(hours=1))
            updated(client, team, first, **change)
            record(first)
        frozen.tick(timedelta(hours=1))
        for instant, one, listed, newest in recorded:
            at = {"as_of": instant.isoformat()}
            past = client.get(f"/v3/lab_tests/{first}", params=at, headers=team.headers)
            assert past.status_code == 200 and past.json() == one, instant
            past_list = client.get("/v3/lab_tests", params=at, headers=team.headers)
            assert past_list.json() == listed, instant
            past_newest = client.get(
                "/v3/lab_tests",
                params={**at, "order_key": "updated_at", "order_direction": "desc"},
                headers=team.headers,
            )
            assert past_newest.json() == newest, instant
    # Then: the second created last was the newest; after a change, the first is.
    assert [t["id"] for t in recorded[0][3][:2]] == [second, first]
    assert [t["id"] for t in recorded[1][3][:2]] == [first, second]
    assert [one["name"] for _, one, _, _ in recorded] == ["First", *["First, renamed"] * 3]
    assert [one["status"] for _, one, _, _ in recorded] == [
        "active",
        "active",
        "inactive",
        "active",
    ]
    with service.db.read() as conn:
        total = conn.execute(select(func.count()).select_from(lab_tests)).scalar_one()
    assert total == 2


# -- a database written before lab tests could change -------------------------------------

# The database main wrote at 1809f39, on each backend (test_todays_main.py's fixture).
written = test_todays_main.written
migrated = test_todays_main.started


def test_the_lab_tests_of_a_database_of_before_are_active_and_can_be_changed(
    written: Written, migrated: Service
) -> None:
    asked = [a for a in written.expected["answers"] if a["path"].startswith("/v3/lab_tests/")]
    assert len(asked) == 1 and asked[0]["status"] == 200
    path, before = asked[0]["path"], asked[0]["body"]
    headers = written.headers("team")
    with TestClient(create_team_api(migrated)) as client, freeze_time(written.now) as frozen:
        # Every row of before is active, last changed at its creation: answered as 1809f39
        # answered it.
        assert client.get(path, headers=headers).json() == before
        assert before["is_active"] is True and before["status"] == "active"
        with migrated.db.read() as conn:
            rows = conn.execute(select(lab_tests)).all()
        assert rows and all(r.active and r.updated_at == r.created_at for r in rows)

        frozen.tick(timedelta(minutes=5))
        response = client.patch(path, json={"name": "Renamed", "active": False}, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json() == {
            **before,
            "name": "Renamed",
            "slug": "renamed",
            "is_active": False,
            "status": "inactive",
        }
        assert client.get(path, headers=headers).json() == response.json()
