"""The rest of the official clients' lab methods (issue 33) through the team API, on both
databases: result metadata, a marker by its lab's code, lab tests a cursor page at a time,
ICD-10-CM validation and search, the insurance and payor refusals, an on-site draw, and
order events sent again to the webhook endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.queries.orders import OrderFilters
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order, OrderedTest, status_of
from healthledger.domain.labs.patients import (
    PatientAddress,
    PatientDetails,
    stored_address,
    stored_details,
)

from tests.conftest import Team
from tests.integration.test_orders import (
    ADDRESS,
    PATIENT,
    T0,
    WELLNESS,
    complete,
    placed,
)
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user
from tests.receivers import Receiver, http_receiver

settings = orders_settings
team = orders_team
user = orders_user
CTX = CommandContext.system("test:lab-methods")
QUEST = 1
QUEST_LIPID_PANEL = 1079  # code 7600


def test_result_metadata_is_the_results_metadata(
    client: TestClient, team: Team, other_team: Team, user: str
) -> None:
    with freeze_time(T0):
        order = placed(client, team, user)["id"]
        early = client.get(f"/v3/order/{order}/result/metadata", headers=team.headers)
        assert early.status_code == 409
        complete(client, team, order, "critical")
    metadata = client.get(f"/v3/order/{order}/result/metadata", headers=team.headers)
    assert metadata.status_code == 200, metadata.text
    results = client.get(f"/v3/order/{order}/result", headers=team.headers).json()
    assert metadata.json() == results["metadata"]
    assert metadata.json()["patient"] == "Ada Lovelace"
    assert metadata.json()["interpretation"] == "critical"
    path = f"/v3/order/{order}/result/metadata"
    assert client.get(path, headers=other_team.headers).status_code == 404
    assert (
        client.get(f"/v3/order/{uuid4()}/result/metadata", headers=team.headers).status_code == 404
    )


def test_a_marker_by_its_labs_code(client: TestClient, team: Team) -> None:
    found = client.get(f"/v3/lab_tests/{QUEST}/markers/7600", headers=team.headers)
    assert found.status_code == 200, found.text
    by_id = client.get(
        "/v3/lab_tests/markers", params={"lab_id": QUEST, "name": "7600"}, headers=team.headers
    )
    listed = {m["id"]: m for m in by_id.json()["markers"]}
    assert found.json() == listed[QUEST_LIPID_PANEL]
    assert found.json()["provider_id"] == "7600"
    unknown_code = client.get(f"/v3/lab_tests/{QUEST}/markers/999999", headers=team.headers)
    assert unknown_code.status_code == 404 and "999999" in unknown_code.json()["detail"]
    assert client.get("/v3/lab_tests/77/markers/7600", headers=team.headers).status_code == 404
    bad = client.get(f"/v3/lab_tests/{QUEST}/markers/7600 x", headers=team.headers)
    assert bad.status_code == 422
    account = client.get(
        f"/v3/lab_tests/{QUEST}/markers/7600",
        params={"lab_account_id": str(uuid4())},
        headers=team.headers,
    )
    assert account.status_code == 422


def test_lab_tests_a_cursor_page_at_a_time(client: TestClient, team: Team) -> None:
    for n in range(3):
        created = client.post(
            "/v3/lab_tests",
            json={
                "name": f"Lipids {n}",
                "method": "walk_in_test",
                "marker_ids": [QUEST_LIPID_PANEL],
            },
            headers=team.headers,
        )
        assert created.status_code == 200, created.text
    everything = client.get("/v3/lab_tests", headers=team.headers).json()
    assert len(everything) == 7  # the four shared demo tests and the team's three
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"lab_test_limit": 3}
        if cursor:
            params["next_cursor"] = cursor
        page = client.get("/v3/lab_test", params=params, headers=team.headers)
        assert page.status_code == 200, page.text
        pages.append(page.json()["data"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [t for p in pages for t in p] == everything
    # Filtered alike: the team's own, by name.
    mine = client.get(
        "/v3/lab_test",
        params={"generation_method": "manual", "name": "lipids 1"},
        headers=team.headers,
    ).json()
    assert [t["name"] for t in mine["data"]] == ["Lipids 1"] and mine["next_cursor"] is None
    # A cursor is the listing's with its filters: forged, or another filter's, is a 400.
    first = client.get("/v3/lab_test", params={"lab_test_limit": 1}, headers=team.headers).json()
    other = client.get(
        "/v3/lab_test",
        params={"lab_test_limit": 1, "next_cursor": first["next_cursor"], "name": "Lipids"},
        headers=team.headers,
    )
    assert other.status_code == 400
    forged = client.get("/v3/lab_test", params={"next_cursor": "abc.def"}, headers=team.headers)
    assert forged.status_code == 400
    assert (
        client.get("/v3/lab_test", params={"lab_test_limit": 101}, headers=team.headers).status_code
        == 422
    )


def test_icd_codes_are_validated_against_icd_10_cm(client: TestClient, team: Team) -> None:
    def validate(*codes: str) -> Any:
        response = client.post(
            "/v3/insurance/validate_icd_codes", json={"codes": list(codes)}, headers=team.headers
        )
        assert response.status_code == 200, response.text
        return response.json()

    assert validate("E11.9", "e785", "Z00.00") == {
        "valid": True,
        "errors": [],
        "violations": [],
        "warnings": [],
    }
    wrong = validate("E11", "XYZ.1")
    assert wrong["valid"] is False and len(wrong["errors"]) == 2
    assert "E11 is a category" in wrong["errors"][0] and "XYZ.1" in wrong["errors"][1]
    # Type 2 diabetes and diabetes due to an underlying condition: Excludes1 of E11.
    excluded = validate("E11.9", "E08.9")
    assert excluded["valid"] is False
    assert {"code": "E11.9", "conflicts_with": "E08.9", "type": "excludes1"} in excluded[
        "violations"
    ]
    # Asthma and COPD: Excludes2 of J45, both may be coded.
    overlap = validate("J45.909", "J44.89")
    assert overlap["valid"] is True
    assert overlap["warnings"] == [
        {"code": "J45.909", "overlaps_with": "J44.89", "type": "excludes2"}
    ]
    bodies: list[dict[str, Any]] = [
        {"codes": []},
        {"codes": ["E11.9"] * 51},
        {"codes": ["x" * 11]},
        {},
    ]
    for body in bodies:
        response = client.post("/v3/insurance/validate_icd_codes", json=body, headers=team.headers)
        assert response.status_code == 422, body


def test_diagnoses_are_searched_by_code_or_words(client: TestClient, team: Team) -> None:
    by_words = client.get(
        "/v3/insurance/search/diagnosis",
        params={"diagnosis_query": "type 2 diabetes without complications"},
        headers=team.headers,
    )
    assert by_words.status_code == 200, by_words.text
    assert {
        "diagnosis_code": "E11.9",
        "description": "Type 2 diabetes mellitus without complications",
        "is_secondary": False,
    } in by_words.json()
    by_code = client.get(
        "/v3/insurance/search/diagnosis", params={"diagnosis_query": "I10"}, headers=team.headers
    ).json()
    assert by_code[0]["diagnosis_code"] == "I10"
    empty = client.get(
        "/v3/insurance/search/diagnosis", params={"diagnosis_query": ""}, headers=team.headers
    )
    assert empty.status_code == 422


def test_insurance_and_payors_say_the_deployment_does_not_bill_insurance(
    client: TestClient, team: Team
) -> None:
    for method, path in (
        ("GET", "/v3/insurance/search/payor"),
        ("POST", "/v3/insurance/search/payor"),
        ("POST", "/v3/payor"),
    ):
        response = client.request(method, path, json={"name": "Aetna"}, headers=team.headers)
        assert response.status_code == 400, (method, path)
        assert "does not bill insurance" in response.json()["detail"]
    assert client.post("/v3/payor", json={}).status_code == 401


def test_an_order_is_billed_to_the_team_or_refused(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    body = {"user_id": user, "lab_test_id": WELLNESS}
    otherwise: list[dict[str, Any]] = [
        {"billing_type": "commercial_insurance"},
        {"health_insurance": {}},
    ]
    for billed in otherwise:
        refused = client.post("/v3/order", json={**body, **billed}, headers=team.headers)
        assert refused.status_code == 400, billed
        assert "does not bill insurance" in refused.json()["detail"]
    assert service.order_queries.page(team.team_id, OrderFilters(), 1, 10).total == 0
    billed_to_team = client.post(
        "/v3/order", json={**body, "billing_type": "client_bill"}, headers=team.headers
    )
    assert billed_to_team.status_code == 200, billed_to_team.text
    unknown = client.post("/v3/order", json={**body, "billing_type": "x"}, headers=team.headers)
    assert unknown.status_code == 422


def test_an_on_site_draw_is_reported_once_by_the_team(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    walk_in = placed(client, team, user)["id"]
    refused = client.patch(f"/v3/order/{walk_in}/draw_completed", headers=team.headers)
    assert refused.status_code == 400 and "not on site" in refused.json()["detail"]
    # No lab of the catalog collects on site: the order is placed as one would be.
    vault = service.lab_orders.vault
    on_site = Order.place(
        CTX,
        service.clock(),
        order_id=uuid4(),
        user_id=UUID(user),
        team_id=team.team_id,
        environment="production",
        lab_id=QUEST,
        collection_method="on_site_collection",
        sealed_lab_test=vault.seal(
            UUID(user), OrderedTest(UUID(WELLNESS), "On site", (QUEST_LIPID_PANEL,)).sealable()
        ),
        # Sealed as the service stores them (what the order's answer opens and checks).
        sealed_patient_details=vault.seal(
            UUID(user), stored_details(PatientDetails.model_validate(PATIENT))
        ),
        sealed_patient_address=vault.seal(
            UUID(user), stored_address(PatientAddress.model_validate(ADDRESS))
        ),
        sealed_request_digest=None,
        status=status_of("received", "on_site_collection", "ordered"),
        next_step_at=None,
    )
    on_site.move_to(
        CTX,
        service.clock(),
        status_of("received", "on_site_collection", "requisition_created"),
        next_step_at=None,
        sample_id="0000000001",
    )
    service.ledger.save(on_site)
    path = f"/v3/order/{on_site.id}/draw_completed"
    drawn = client.patch(path, headers=team.headers)
    assert drawn.status_code == 200, drawn.text
    assert (
        drawn.json()["order"]["last_event"]["status"]
        == "sample_with_lab.on_site_collection.draw_completed"
    )
    assert drawn.json()["status"] == "sample_with_lab"
    recorded = list(service.ledger.events.get(on_site.id))[-1]
    assert isinstance(recorded, Order.StatusChanged) and recorded.status.endswith("draw_completed")
    again = client.patch(path, headers=team.headers)
    assert again.status_code == 400 and "only once" in again.json()["detail"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_order_events_are_sent_again_with_their_message_ids(
    client: TestClient,
    team: Team,
    other_team: Team,
    user: str,
    service: Service,
    receiver: Receiver,
) -> None:
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    first = placed(client, team, user)["id"]
    second = placed(client, team, user)["id"]
    client.post(f"/v3/order/{first}/test", headers=team.headers)
    service.jobs.dispatch_webhooks()
    sent = [(r.headers["webhook-id"], json.loads(r.body)) for r in receiver.on("ok")]
    of_first = [message for message, body in sent if body["data"]["id"] == first]
    assert len(of_first) == 2  # created, then its requisition
    answer = client.post(
        "/v3/order/resend_events", json={"order_ids": [first]}, headers=team.headers
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"order_ids": [first]}
    service.jobs.dispatch_webhooks()
    again = [(r.headers["webhook-id"], json.loads(r.body)) for r in receiver.on("ok")[len(sent) :]]
    assert sorted(message for message, _ in again) == sorted(of_first)
    assert {body["data"]["id"] for _, body in again} == {first}
    # Another team's order is unknown; a request naming nothing is refused.
    assert (
        client.post(
            "/v3/order/resend_events", json={"order_ids": [second]}, headers=other_team.headers
        ).status_code
        == 404
    )
    assert client.post("/v3/order/resend_events", json={}, headers=team.headers).status_code == 422
    # Bounds with and without an offset compare (no offset: UTC); a window of nothing.
    mixed = {"start_at": "2026-03-10T12:00:00", "end_at": "2026-03-10T11:00:00+00:00"}
    assert (
        client.post("/v3/order/resend_events", json=mixed, headers=team.headers).status_code == 422
    )
    window = {"start_at": "2000-01-01T00:00:00", "end_at": "2000-01-02T00:00:00Z"}
    nothing = client.post("/v3/order/resend_events", json=window, headers=team.headers)
    assert nothing.status_code == 200 and nothing.json() == {"order_ids": []}


def test_an_order_placed_outside_is_imported_with_its_sample_id(
    client: TestClient, team: Team, other_team: Team, user: str, service: Service
) -> None:
    body: dict[str, Any] = {
        "user_id": user,
        "billing_type": "client_bill",
        "order_set": {"lab_test_ids": [WELLNESS]},
        "collection_method": "walk_in_test",
        "patient_details": PATIENT,
        "patient_address": ADDRESS,
        "sample_id": "QX-20260310-7",
        "physician": {"first_name": "Jane", "last_name": "Doe", "npi": "1234567893"},
    }
    with freeze_time(T0):
        imported = client.post("/v3/order/import", json=body, headers=team.headers)
        assert imported.status_code == 200, imported.text
        order = imported.json()["order"]
        assert order["sample_id"] == "QX-20260310-7"
        assert [e["status"] for e in order["events"]] == [
            "received.walk_in_test.ordered",
            "received.walk_in_test.requisition_created",
        ]
        assert order["lab_test"]["id"] == WELLNESS and len(order["lab_test"]["markers"]) == 5
        assert order["patient_details"]["last_name"] == "Hopper"
        # Two events on the order, its test and patient sealed; then it moves as any order.
        recorded = list(service.ledger.events.get(UUID(order["id"])))
        assert [type(e).__name__ for e in recorded] == ["Created", "StatusChanged"]
        assert "Hopper" not in str(vars(recorded[0])) and "Annual" not in str(vars(recorded[0]))
        done = complete(client, team, order["id"])
        assert done["sample_id"] == "QX-20260310-7" and done["status"] == "completed"
    # An order set with an add-on: the set's own id and a name of its tests.
    with_add_on = client.post(
        "/v3/order/import",
        json={
            **body,
            "order_set": {"lab_test_ids": [WELLNESS], "add_on": {"provider_ids": ["7600"]}},
        },
        headers=team.headers,
    )
    assert with_add_on.status_code == 200, with_add_on.text
    assert with_add_on.json()["order"]["lab_test"]["name"] == "Annual Wellness (Quest, walk-in)"
    assert with_add_on.json()["order"]["lab_test"]["id"] != WELLNESS
    # Refused, nothing recorded: insurance, a method the lab does not offer, a bad sample
    # id, an unknown lab test, another team's user.
    before = service.order_queries.page(team.team_id, OrderFilters(), 1, 10).total
    refusals: list[tuple[dict[str, Any], int]] = [
        ({"billing_type": "commercial_insurance"}, 400),
        ({"collection_method": "testkit"}, 422),
        ({"sample_id": "no spaces"}, 422),
        ({"order_set": {"lab_test_ids": [str(uuid4())]}}, 404),
        ({"order_set": {}}, 422),
    ]
    for change, status in refusals:
        response = client.post("/v3/order/import", json={**body, **change}, headers=team.headers)
        assert response.status_code == status, (change, response.text)
    other = client.post("/v3/order/import", json=body, headers=other_team.headers)
    assert other.status_code == 404
    assert service.order_queries.page(team.team_id, OrderFilters(), 1, 10).total == before
