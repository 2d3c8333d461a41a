"""Lab test orders through the team API (issue 14; gaps.md Orders), on both databases:
placing (defaults from demographics, idempotency keys), reading (now and `as_of`),
listing with filters and paging, cancelling, `/test` steps, results, the bad input the
issue lists, other teams' orders, and the user's deletion and erasure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.answers.orders import _ADDRESS_MEMBERS, _DETAIL_MEMBERS
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.compliance.deletion_report import deletion_report
from healthledger.adapters.compliance.report_rendering import render_html
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import orders
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from sqlalchemy import func, select
from vital.types import ClientFacingOrder, GetOrdersResponse, LabResultsRaw, PostOrderResponse

from tests.conftest import Team, create_user

# The shared demo lab tests (adapters/reference/labs/demo_lab_tests.json).
WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, walk-in, five markers
HEART = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"  # Labcorp, at-home phlebotomy
THYROID_KIT = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a03"  # ZRT, test kit
CTX = CommandContext.system("test:orders")
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

DEMOGRAPHICS = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada.lovelace@example.org",
    "phone_number": "+1 555 010 1815",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {
        "first_line": "12 Analytical Row",
        "city": "Austin",
        "state": "TX",
        "zip_code": "78701",
    },
}
PATIENT = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "email": "grace.hopper@example.org",
    "phone_number": "+1 555 010 1906",
    "gender": "female",
    "dob": "1956-12-09",
}
ADDRESS = {
    "first_line": "1 Navy Yard",
    "city": "Washington",
    "state": "DC",
    "zip": "20374",
    "country": "US",
}
# Personal values that must never show outside an answer to the team.
PERSONAL = ("Lovelace", "Analytical Row", "Hopper", "Navy Yard", "1956-12-09", "1985-12-10")


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    # Every order runs its whole course (no lab failure, no lab cancellation).
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
        lab_order_failure_rate=0,
        lab_order_cancellation_rate=0,
    )


@pytest.fixture
def team(service: Service) -> Team:
    # Made before the instants the tests travel to: an as_of before the team is a 422.
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def user(client: TestClient, team: Team, service: Service) -> str:
    """A live user of the team with demographics."""
    service.teams.set_feature(CTX, team.team_id, "demographics", True)
    user_id: str = create_user(client, team, "orders-1")["user_id"]
    recorded = client.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=team.headers)
    assert recorded.status_code == 200, recorded.text
    return user_id


def place(
    client: TestClient, team: Team, user_id: str, lab_test_id: str = WELLNESS, **body: Any
) -> Any:
    key = body.pop("idempotency_key", None)
    headers = {**team.headers, **({"X-Idempotency-Key": key} if key else {})}
    return client.post(
        "/v3/order", json={"user_id": user_id, "lab_test_id": lab_test_id, **body}, headers=headers
    )


def placed(client: TestClient, team: Team, user_id: str, **body: Any) -> dict[str, Any]:
    response = place(client, team, user_id, **body)
    assert response.status_code == 200, response.text
    return response.json()


def step(client: TestClient, team: Team, order_id: str, **flags: Any) -> Any:
    return client.post(f"/v3/order/{order_id}/test", json=flags or None, headers=team.headers)


def complete(client: TestClient, team: Team, order_id: str, outcome: str = "normal") -> Any:
    while True:
        response = step(client, team, order_id, interpretation=outcome)
        assert response.status_code == 200, response.text
        if response.json()["status"] == "completed":
            return response.json()


def events_of(service: Service, stream: str | UUID) -> list[Any]:
    return list(service.ledger.events.get(UUID(str(stream))))


# -- placing --------------------------------------------------------------------------------


def test_an_order_defaults_to_the_tests_method_and_the_users_demographics(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    response = place(client, team, user)
    assert response.status_code == 200, response.text
    body = response.json()
    # The spec's order, the client's ClientFacingOrder and its PostOrderResponse around it.
    order = ClientFacingOrder.model_validate(body)
    PostOrderResponse.model_validate(body)
    assert body["order"] == {k: v for k, v in body.items() if k not in ("order", "message")}
    assert (order.user_id, order.team_id) == (user, str(team.team_id))
    assert (body["status"], body["detailed_status"]) == (
        "received",
        "received.walk_in_test.ordered",
    )
    assert body["interpretation"] is None and body["sample_id"] is None
    assert [e["status"] for e in body["events"]] == ["received.walk_in_test.ordered"]
    assert body["lab_test"]["id"] == WELLNESS and body["lab_test"]["method"] == "walk_in_test"
    assert body["lab_test"]["lab"]["slug"] == "quest" and len(body["lab_test"]["markers"]) == 5
    assert body["details"]["type"] == "walk_in_test"
    details = {k: v for k, v in DEMOGRAPHICS.items() if k != "address"}
    assert {k: body["patient_details"][k] for k in details} == details
    assert body["patient_address"]["zip"] == body["patient_address"]["zip_code"] == "78701"
    # Read back the same; the log holds the patient sealed (nothing personal in clear).
    got = client.get(f"/v3/order/{order.id}", headers=team.headers)
    assert got.status_code == 200 and got.json() == body["order"]
    (created,) = events_of(service, order.id)
    assert isinstance(created, Order.Created) and created.user_id == UUID(user)
    assert created.environment == "sandbox" and created.next_step_at is not None
    stored = json.dumps([str(vars(created))])
    assert not any(value in stored for value in PERSONAL)


def test_the_patient_can_be_sent_and_the_method_chosen_among_the_labs(
    client: TestClient, team: Team, user: str
) -> None:
    body = placed(
        client,
        team,
        user,
        lab_test_id=HEART,
        collection_method="walk_in_test",
        patient_details=PATIENT,
        patient_address=ADDRESS,
    )
    assert body["detailed_status"] == "received.walk_in_test.ordered"
    assert body["patient_details"]["last_name"] == "Hopper"
    assert (body["patient_address"]["zip"], body["patient_address"]["country"]) == ("20374", "US")
    # A method the test's lab does not offer is refused, naming the field.
    refused = place(client, team, user, lab_test_id=THYROID_KIT, collection_method="walk_in_test")
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "collection_method"]


def test_without_demographics_the_answer_names_what_is_missing(
    client: TestClient, team: Team
) -> None:
    bare = create_user(client, team, "no-demographics")["user_id"]
    both = place(client, team, bare)
    assert both.status_code == 422
    (problem,) = both.json()["detail"]
    assert problem["loc"] == ["body", "patient_details"]
    assert "patient_details and patient_address" in problem["msg"]
    address_only = place(client, team, bare, patient_details=PATIENT)
    assert address_only.status_code == 422
    assert address_only.json()["detail"][0]["loc"] == ["body", "patient_address"]
    assert client.get("/v3/orders", headers=team.headers).json()["total"] == 0
    # Both sent: no demographics needed.
    assert (
        place(client, team, bare, patient_details=PATIENT, patient_address=ADDRESS).status_code
        == 200
    )


def test_an_idempotency_key_answers_the_first_order_and_refuses_another_body(
    client: TestClient, team: Team, user: str, other_team: Team, service: Service
) -> None:
    first = placed(client, team, user, idempotency_key="order-42")
    again = placed(client, team, user, idempotency_key="order-42")
    assert again["id"] == first["id"] and again["order"] == first["order"]
    assert len(events_of(service, first["id"])) == 1  # nothing new recorded
    # A null sent for an optional field is the same body as the field left out.
    same = placed(client, team, user, idempotency_key="order-42", collection_method=None)
    assert same["id"] == first["id"]
    other = place(client, team, user, lab_test_id=HEART, idempotency_key="order-42")
    assert other.status_code == 409 and "X-Idempotency-Key" in other.json()["detail"]
    # Another team's key is its own: the same text places another team's order.
    theirs = create_user(client, other_team, "theirs")["user_id"]
    their_order = placed(
        client,
        other_team,
        theirs,
        patient_details=PATIENT,
        patient_address=ADDRESS,
        idempotency_key="order-42",
    )
    assert their_order["id"] != first["id"]
    assert client.get("/v3/orders", headers=team.headers).json()["total"] == 1
    # Malformed keys are refused before anything is done.
    for key in ("", "x" * 256, "bad\x7fkey"):
        response = client.post(
            "/v3/order",
            json={"user_id": user, "lab_test_id": WELLNESS},
            headers={**team.headers, "X-Idempotency-Key": key},
        )
        assert response.status_code == 422, key


def test_orders_for_users_that_cannot_order_are_refused(
    client: TestClient, team: Team, user: str, other_team: Team, service: Service
) -> None:
    theirs = create_user(client, other_team, "theirs")["user_id"]
    assert place(client, team, theirs).status_code == 404
    assert place(client, team, str(uuid4())).status_code == 404
    assert place(client, team, user, lab_test_id=str(uuid4())).status_code == 404
    # Another team's own lab test is as unknown as one that never existed.
    their_test = service.lab_test_commands.create(
        CTX, other_team.team_id, name="Theirs", method="walk_in_test", marker_ids=[1077]
    )
    unknown = place(client, team, user, lab_test_id=str(their_test.id))
    assert unknown.status_code == 404 and str(their_test.id) in unknown.json()["detail"]
    assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    pending = place(client, team, user)
    assert pending.status_code == 404 and "scheduled for deletion" in pending.json()["detail"]
    for bad in (
        {"user_id": "not-a-uuid", "lab_test_id": WELLNESS},
        {"user_id": user, "lab_test_id": WELLNESS, "collection_method": "by_drone"},
        {"user_id": user, "lab_test_id": WELLNESS, "unknown": 1},
        {
            "user_id": user,
            "lab_test_id": WELLNESS,
            "patient_details": {**PATIENT, "dob": "2999-01-01"},
        },
        {"user_id": user, "lab_test_id": WELLNESS, "patient_address": {"first_line": "x"}},
        {"user_id": user},
    ):
        response = client.post("/v3/order", json=bad, headers=team.headers)
        assert response.status_code == 422, bad
        assert not any(v in response.text for v in PERSONAL)
    oversized = client.post(
        "/v3/order",
        content=b'{"user_id": "' + b"x" * 2_000_000 + b'"}',
        headers={**team.headers, "content-type": "application/json"},
    )
    assert oversized.status_code == 413
    with service.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(orders)).scalar_one() == 0


# -- reading, listing ---------------------------------------------------------------------


def test_another_teams_orders_are_not_found(
    client: TestClient, team: Team, user: str, other_team: Team
) -> None:
    order = placed(client, team, user)["id"]
    for method, path in (
        ("GET", f"/v3/order/{order}"),
        ("GET", f"/v3/order/{order}/result"),
        ("POST", f"/v3/order/{order}/cancel"),
        ("POST", f"/v3/order/{order}/test"),
    ):
        response = client.request(method, path, headers=other_team.headers)
        assert response.status_code == 404, (method, path)
        assert response.json() == {"detail": "Order not found."}
    assert client.get("/v3/orders", headers=other_team.headers).json()["total"] == 0
    assert client.get(f"/v3/order/{uuid4()}", headers=team.headers).status_code == 404
    assert client.get("/v3/order/not-an-id", headers=team.headers).status_code in (404, 422)
    assert client.get(f"/v3/order/{order}", headers=team.headers).json()["status"] == "received"


def test_listings_filter_and_page(client: TestClient, team: Team, user: str) -> None:
    second = create_user(client, team, "orders-2")["user_id"]
    made: list[dict[str, Any]] = []
    with freeze_time(T0) as frozen:
        for index in range(5):
            frozen.tick(timedelta(minutes=1))
            owner = user if index % 2 == 0 else second
            made.append(
                placed(
                    client,
                    team,
                    owner,
                    lab_test_id=THYROID_KIT if index == 4 else WELLNESS,
                    patient_details=PATIENT,
                    patient_address=ADDRESS,
                )
            )
        frozen.tick(timedelta(minutes=1))
        complete(client, team, made[0]["id"], "critical")
        complete(client, team, made[1]["id"], "normal")
        step(client, team, made[2]["id"])
        client.post(f"/v3/order/{made[3]['id']}/cancel", headers=team.headers)

    def listed(**params: Any) -> list[str]:
        response = client.get("/v3/orders", params=params, headers=team.headers)
        assert response.status_code == 200, response.text
        # The spec's path (service-api.md: GET /orders) answers the same.
        assert client.get("/orders", params=params, headers=team.headers).json() == response.json()
        page = GetOrdersResponse.model_validate(response.json())
        assert page.total is not None
        return [order.id for order in page.orders]

    ids = [order["id"] for order in made]
    assert listed() == ids[::-1]  # newest first
    assert listed(user_id=user) == [ids[4], ids[2], ids[0]]
    assert listed(status="completed") == [ids[1], ids[0]]
    assert listed(status=["cancelled", "requisition_created"]) == [ids[3], ids[2]]
    assert listed(status="ordered") == [ids[4]]
    assert listed(interpretation="critical") == [ids[0]]
    assert listed(interpretation="normal") == [ids[1]]
    assert listed(order_type="testkit") == [ids[4]]
    assert listed(order_ids=[ids[0], ids[3]]) == [ids[3], ids[0]]
    minute = (T0 + timedelta(minutes=2)).isoformat()
    assert listed(start_date=minute, end_date=(T0 + timedelta(minutes=3)).isoformat()) == [
        ids[2],
        ids[1],
    ]
    assert listed(start_date=T0.date().isoformat(), end_date=T0.date().isoformat()) == ids[::-1]
    assert listed(start_date=(T0 + timedelta(days=1)).date().isoformat()) == []
    assert listed(updated_start_date=(T0 + timedelta(minutes=6)).isoformat()) == [
        ids[3],
        ids[2],
        ids[1],
        ids[0],
    ]
    first = client.get("/v3/orders", params={"size": 2}, headers=team.headers).json()
    assert (first["total"], first["page"], first["size"], first["pages"]) == (5, 1, 2, 3)
    last = client.get("/v3/orders", params={"size": 2, "page": 3}, headers=team.headers).json()
    assert [o["id"] for o in last["orders"]] == [ids[0]]
    beyond = client.get("/v3/orders", params={"size": 2, "page": 9}, headers=team.headers)
    assert beyond.status_code == 200 and beyond.json()["orders"] == []
    for bad in (
        {"size": 0},
        {"size": 101},
        {"page": 0},
        {"page": "one"},
        {"status": "shipped"},
        {"interpretation": "odd"},
        {"start_date": "last tuesday"},
        {"user_id": "nope"},
        {"order_type": "by_drone"},
    ):
        response = client.get("/v3/orders", params=bad, headers=team.headers)
        assert response.status_code == 422, bad
        assert isinstance(response.json()["detail"], list)


# -- cancelling, stepping, results --------------------------------------------------------------


def test_cancel_an_open_order_but_not_a_completed_one(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    order = placed(client, team, user)["id"]
    cancelled = client.post(f"/v3/order/{order}/cancel", headers=team.headers)
    assert cancelled.status_code == 200
    body = PostOrderResponse.model_validate(cancelled.json())
    assert body.order.status is not None and body.order.status.value == "cancelled"
    assert cancelled.json()["detailed_status"] == "cancelled.walk_in_test.cancelled"
    again = client.post(f"/v3/order/{order}/cancel", headers=team.headers)
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    assert step(client, team, order).status_code == 400
    done = placed(client, team, user)["id"]
    complete(client, team, done)
    refused = client.post(f"/v3/order/{done}/cancel", headers=team.headers)
    assert refused.status_code == 409 and "completed" in refused.json()["detail"]
    last = events_of(service, order)[-1]
    assert isinstance(last, Order.Cancelled) and last.reason == "team_request"


def test_test_steps_a_sandbox_order_to_its_results(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    order = placed(client, team, user, lab_test_id=HEART)["id"]
    early = client.get(f"/v3/order/{order}/result", headers=team.headers)
    assert early.status_code == 409 and "no results yet" in early.json()["detail"]
    statuses = []
    while True:
        response = step(client, team, order, interpretation="critical")
        assert response.status_code == 200
        statuses.append(response.json()["detailed_status"])
        if response.json()["status"] == "completed":
            break
    assert statuses == [
        "received.at_home_phlebotomy.requisition_created",
        "collecting_sample.at_home_phlebotomy.appointment_pending",
        "sample_with_lab.at_home_phlebotomy.partial_results",
        "completed.at_home_phlebotomy.completed",
    ]
    body = client.get(f"/v3/order/{order}", headers=team.headers).json()
    assert body["interpretation"] == "critical" and len(body["events"]) == 5
    assert body["sample_id"] is not None and body["sample_id"].isdigit()
    response = client.get(f"/v3/order/{order}/result", headers=team.headers)
    assert response.status_code == 200
    results = LabResultsRaw.model_validate(response.json())
    assert results.metadata.patient == "Ada Lovelace" and results.metadata.specimen_number
    assert results.metadata.dob == "1985-12-10"
    values = response.json()["results"]
    markers = [service.lab_catalog.marker(m["id"]) for m in body["lab_test"]["markers"]]
    expected = [result.id for marker in markers if marker for result in marker.expected_results]
    # One value per expected result of the test's markers, each with its range and reading.
    assert [v["expected_result_id"] for v in values] == expected
    assert [v["interpretation"] for v in values].count("critical") == 1
    for value in values:
        assert value["unit"] is not None or value["type"] == "coded_value"
        assert value["interpretation"] in ("normal", "abnormal", "critical")
        assert value["result"]
    # Deterministic: read twice, the same.
    assert client.get(f"/v3/order/{order}/result", headers=team.headers).json() == response.json()
    assert step(client, team, order).status_code == 400
    bad_flags = step(client, team, placed(client, team, user)["id"], interpretation="weird")
    assert bad_flags.status_code == 422


def test_a_production_order_does_not_move_in_the_sandbox(
    client: TestClient, team: Team, service: Service
) -> None:
    production = service.teams.issue_team_api_key(CTX, team.team_id, environment="production")
    live = Team(team.team_id, production.plain)
    user_id = create_user(client, live, "prod-user")["user_id"]
    order = placed(client, live, user_id, patient_details=PATIENT, patient_address=ADDRESS)
    assert order["detailed_status"] == "received.walk_in_test.ordered"
    refused = step(client, live, order["id"])
    assert refused.status_code == 400 and "sandbox" in refused.json()["detail"]
    assert service.jobs.progress_lab_orders() == 0
    (created,) = events_of(service, order["id"])
    assert created.environment == "production" and created.next_step_at is None


# -- the user's deletion and erasure --------------------------------------------------------------


def test_deleting_the_user_cancels_its_open_orders_in_the_same_transaction(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    open_one = placed(client, team, user)["id"]
    done = placed(client, team, user)["id"]
    complete(client, team, done)
    assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    cancel = events_of(service, open_one)[-1]
    assert isinstance(cancel, Order.Cancelled) and cancel.reason == "user_deleted"
    deleted = events_of(service, user)[-1]
    # One command, one transaction: the same request and the same instant.
    assert (cancel.request_id, cancel.timestamp) == (deleted.request_id, deleted.timestamp)
    assert isinstance(events_of(service, done)[-1], Order.Completed)
    # Undone, the user is back and the order stays cancelled.
    undo = client.post("/v2/user/undo_delete", params={"user_id": user}, headers=team.headers)
    assert undo.status_code == 200
    body = client.get(f"/v3/order/{open_one}", headers=team.headers).json()
    assert body["status"] == "cancelled"


def test_erasure_destroys_the_orders_data_and_the_audit_keeps_that_it_happened(
    settings: Settings, team: Team, client: TestClient, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        kept = placed(client, team, user, idempotency_key="erase-me")["id"]
        complete(client, team, kept, "abnormal")
        cancelled = placed(client, team, user)["id"]
        frozen.tick(timedelta(hours=1))
        before = client.get(f"/v3/order/{kept}", headers=team.headers).json()
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
        frozen.tick(timedelta(days=8))
        assert service.jobs.sweep_erasures() == 1
        for path in (f"/v3/order/{kept}", f"/v3/order/{kept}/result", f"/v3/order/{cancelled}"):
            assert client.get(path, headers=team.headers).status_code == 404
        assert client.get("/v3/orders", headers=team.headers).json()["total"] == 0
        with service.db.read() as conn:
            left = conn.execute(
                select(func.count()).select_from(orders).where(orders.c.user_id == UUID(user))
            ).scalar_one()
        assert left == 0
        erased = events_of(service, user)[-1]
        assert erased.checked["read_model:orders"] == 2
        # The audit keeps every order event, its personal values erased.
        entries = [e for e in history(service, UUID(user)) if e.stream_kind == "order"]
        assert {e.stream_id for e in entries} == {UUID(kept), UUID(cancelled)}
        assert "Order.Cancelled" in {e.event for e in entries}
        text = json.dumps([e.changes for e in entries], default=str)
        assert ERASED_PLACEHOLDER in text and SEALED_PLACEHOLDER not in text
        assert not any(value in text for value in PERSONAL)
        # The past answer holds, with the personal values as erased placeholders.
        past = client.get(
            f"/v3/order/{kept}",
            params={"as_of": (T0 + timedelta(hours=1)).isoformat()},
            headers=team.headers,
        ).json()
        for erased_part in (past["patient_details"], past["patient_address"]):
            assert set(erased_part.values()) == {ERASED_PLACEHOLDER}
        assert past["interpretation"] == ERASED_PLACEHOLDER
        # The test ordered is a health fact, sealed with the user's key (issue 29): gone.
        assert past["lab_test"] == _erased_lab_test(before["lab_test"])
        erased_members = ("interpretation", "lab_test")
        assert {
            k: v for k, v in past.items() if not k.startswith("patient") and k not in erased_members
        } == {
            k: v
            for k, v in before.items()
            if not k.startswith("patient") and k not in erased_members
        }
        # The deletion report lists the order its deletion cancelled, and verifies.
        report = deletion_report(service, UUID(user), CTX, team_id=team.team_id)
    orders_section = report["request"]["orders"]
    assert orders_section["supported"] is True
    assert [o["order_id"] for o in orders_section["cancelled"]] == [cancelled]
    assert verify_report(report) == []
    assert not any(value in json.dumps(report) for value in PERSONAL)
    # Printed for an auditor: the order and its cancellation.
    page = render_html(report)
    assert cancelled in page and "user_deleted" in page
    # A report that names a cancellation the proof does not hold does not verify.
    forged = json.loads(json.dumps(report))
    forged["request"]["orders"]["cancelled"][0]["version"] = 99
    assert any("not an event of the proof" in p for p in verify_report(forged))


# -- time travel ----------------------------------------------------------------------------------


def test_as_of_answers_what_the_order_answered_then(
    client: TestClient, team: Team, user: str
) -> None:
    recorded: list[tuple[datetime, dict[str, Any]]] = []
    with freeze_time(T0) as frozen:
        order = placed(client, team, user, lab_test_id=THYROID_KIT)["id"]
        recorded.append((T0, client.get(f"/v3/order/{order}", headers=team.headers).json()))
        for _ in range(4):
            frozen.tick(timedelta(hours=3))
            step(client, team, order, interpretation="abnormal")
            now = datetime.now(UTC)
            recorded.append((now, client.get(f"/v3/order/{order}", headers=team.headers).json()))
        frozen.tick(timedelta(hours=1))
        for instant, answer in recorded:
            past = client.get(
                f"/v3/order/{order}", params={"as_of": instant.isoformat()}, headers=team.headers
            )
            assert past.status_code == 200
            assert past.json() == answer, instant
        before = client.get(
            f"/v3/order/{order}",
            params={"as_of": (T0 - timedelta(seconds=1)).isoformat()},
            headers=team.headers,
        )
        assert before.status_code == 404
        future = client.get(
            f"/v3/order/{order}",
            params={"as_of": (T0 + timedelta(days=30)).isoformat()},
            headers=team.headers,
        )
        assert future.status_code == 422
        assert (
            client.get(
                f"/v3/order/{order}", params={"as_of": "yesterday"}, headers=team.headers
            ).status_code
            == 422
        )


def test_as_of_lists_the_orders_and_their_results_as_then(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    """The listing (filters and paging included) and each order's results, recorded at
    every step, answered again by `as_of`: after a cancellation, and after the second
    user's erasure (its orders then as the erased placeholders, gone from the live list)."""
    second = create_user(client, team, "orders-2")["user_id"]
    queries: list[dict[str, Any]] = [
        {},
        {"size": 2},
        {"size": 2, "page": 2},
        {"user_id": second},
        {"status": ["completed"]},
        {"status": ["requisition_created", "cancelled"]},
        {"interpretation": "abnormal"},
        {"order_type": ["testkit"]},
        {"updated_start_date": (T0 + timedelta(hours=2)).isoformat()[:19]},
    ]
    made: list[str] = []
    recorded: list[tuple[datetime, list[Any], dict[str, tuple[int, Any]]]] = []

    def record() -> None:
        lists = []
        for query in queries:
            response = client.get("/v3/orders", params=query, headers=team.headers)
            assert response.status_code == 200, response.text
            lists.append(response.json())
        results = {}
        for order in made:
            response = client.get(f"/v3/order/{order}/result", headers=team.headers)
            results[order] = (response.status_code, response.json())
        recorded.append((datetime.now(UTC), lists, results))

    with freeze_time(T0) as frozen:
        record()  # no order yet
        for index, (owner, test) in enumerate(
            [(user, WELLNESS), (second, THYROID_KIT), (user, HEART), (second, WELLNESS)]
        ):
            frozen.tick(timedelta(hours=1))
            patient = (
                {} if owner == user else {"patient_details": PATIENT, "patient_address": ADDRESS}
            )
            made.append(placed(client, team, owner, lab_test_id=test, **patient)["id"])
            if index % 2:
                record()
        frozen.tick(timedelta(hours=1))
        complete(client, team, made[0], "abnormal")
        complete(client, team, made[1], "critical")
        record()
        frozen.tick(timedelta(hours=1))
        step(client, team, made[2])
        cancelled = client.post(f"/v3/order/{made[3]}/cancel", headers=team.headers)
        assert cancelled.status_code == 200, cancelled.text
        record()
        frozen.tick(timedelta(hours=1))
        assert client.delete(f"/v2/user/{second}", headers=team.headers).status_code == 200
        record()
    # The second user erased after its grace period: its orders leave the live list.
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
        live = client.get("/v3/orders", headers=team.headers).json()
        assert {o["user_id"] for o in live["orders"]} == {user}
        for instant, lists, results in recorded:
            for query, answer in zip(queries, lists, strict=True):
                if "interpretation" in query and instant >= recorded[3][0]:
                    continue  # once the erased user's order was interpreted: a 422 below
                for path in ("/v3/orders", "/orders"):  # the clients' path and the spec's
                    past = client.get(
                        path, params={**query, "as_of": instant.isoformat()}, headers=team.headers
                    )
                    assert past.status_code == 200, past.text
                    assert past.json() == _erased_orders(answer, second), (path, instant, query)
            for order, (status, body) in results.items():
                past = client.get(
                    f"/v3/order/{order}/result",
                    params={"as_of": instant.isoformat()},
                    headers=team.headers,
                )
                assert past.status_code == status, (instant, order)
                expected = body
                if status == 200 and body["metadata"]["patient_id"] == second:
                    expected = _erased_results(body)
                assert past.json() == expected, (instant, order)
        # Filtered by a value erased since: it cannot be opened, so no answer is given.
        # Before that order was interpreted, the filter answers (above).
        for instant, _, _ in recorded[3:]:
            refused = client.get(
                "/v3/orders",
                params={"interpretation": "abnormal", "as_of": instant.isoformat()},
                headers=team.headers,
            )
            assert refused.status_code == 422, refused.text
            assert refused.json()["detail"][0]["loc"] == ["query", "interpretation"]
        # Not placed yet then, or placed in the future: 404 and 422.
        early = client.get(
            f"/v3/order/{made[3]}/result",
            params={"as_of": recorded[0][0].isoformat()},
            headers=team.headers,
        )
        assert early.status_code == 404
        future = client.get(
            "/v3/orders",
            params={"as_of": (T0 + timedelta(days=9)).isoformat()},
            headers=team.headers,
        )
        assert future.status_code == 422


def _erased_orders(page: dict[str, Any], user_id: str) -> dict[str, Any]:
    """A recorded listing with the orders of `user_id`, erased since, as `as_of` shows
    them: every personal member the placeholder."""

    def erased(members: tuple[str, ...]) -> dict[str, Any]:
        # The members an erased value shows (adapters/answers/orders.py).
        return dict.fromkeys(members, ERASED_PLACEHOLDER)

    def hide(order: dict[str, Any]) -> dict[str, Any]:
        if order["user_id"] != user_id:
            return order
        hidden = {
            **order,
            "patient_details": erased(_DETAIL_MEMBERS),
            "patient_address": erased(_ADDRESS_MEMBERS),
            "lab_test": _erased_lab_test(order["lab_test"]),
        }
        if order["interpretation"] is not None:
            hidden["interpretation"] = ERASED_PLACEHOLDER
        return hidden

    return {**page, "orders": [hide(o) for o in page["orders"]]}


def _erased_lab_test(lab_test: dict[str, Any]) -> dict[str, Any]:
    """A recorded order's test, of a user erased since, as `as_of` shows it: its id,
    slug and name the placeholder, its markers (and their price) gone."""
    return {
        **lab_test,
        **dict.fromkeys(("id", "slug", "name"), ERASED_PLACEHOLDER),
        "markers": [],
        "price": 0.0,
    }


def _erased_results(body: dict[str, Any]) -> dict[str, Any]:
    """Recorded results of a user erased since, as `as_of` shows them: the values, the
    patient and the interpretation as the placeholder."""
    patient = dict.fromkeys(("patient", "dob", "age"), ERASED_PLACEHOLDER)
    return {
        **body,
        "metadata": {**body["metadata"], **patient, "interpretation": ERASED_PLACEHOLDER},
        "results": ERASED_PLACEHOLDER,
        "interpretation": ERASED_PLACEHOLDER,
    }


@pytest.fixture
def second_service(settings: Settings) -> Iterator[Service]:
    built = build_service(settings)
    yield built
    built.close()


def test_a_key_used_in_one_process_answers_in_another(
    client: TestClient, team: Team, user: str, service: Service, second_service: Service
) -> None:
    from healthledger.domain.labs.ordering import OrderRequest

    request = OrderRequest(user_id=UUID(user), lab_test_id=UUID(WELLNESS))
    ctx = CommandContext(actor="test", request_id="r", environment="sandbox")
    first = service.lab_orders.place(ctx, team.team_id, request, "shared-key")
    second = second_service.lab_orders.place(ctx, team.team_id, request, "shared-key")
    assert first.id == second.id
    assert len(events_of(service, first.id)) == 1
