"""junction-api-sdk's `estimate_order_set_pricing` (`POST
/v3/lab_test/estimate_order_set_pricing`): each order set priced from the catalog's marker
prices, the prices an order of the same test is answered with, in cents; and the refusals
(another team's test, markers of two labs, a modality the lab does not offer, not a US
state, a bill other than the team's), none of which records anything."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service

from tests.conftest import Team, create_user
from tests.integration.test_lab_test_updates import ADDRESS, PATIENT
from tests.integration.test_lab_tests import DEMO_QUEST_TEST, counts, create

PATH = "/v3/lab_test/estimate_order_set_pricing"


def estimate(client: TestClient, team: Team, **body: Any) -> Any:
    return client.post(
        PATH, json={"modality": "walk_in_test", "us_state": "TX", **body}, headers=team.headers
    )


def cents(price: str | float) -> int:
    return int(Decimal(str(price)) * 100)


def test_each_order_set_is_priced_from_the_catalog_as_its_orders_are(
    client: TestClient, team: Team, service: Service
) -> None:
    mine = create(client, team, name="Mine", marker_ids=[1046, 1077])
    demo = client.get(f"/v3/lab_tests/{DEMO_QUEST_TEST}", headers=team.headers).json()
    response = estimate(
        client,
        team,
        order_sets=[
            {"lab_test_ids": [mine["id"]]},
            {"lab_test_ids": [str(DEMO_QUEST_TEST)], "add_on": {"marker_ids": [1047]}},
            {"add_on": {"provider_ids": ["561"], "marker_ids": [1046]}},
        ],
        billing="client_bill",
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["currency"] == "USD" and len(answer["data"]) == 3
    first, second, third = answer["data"]

    # The test's markers, each at its catalog price; the total is the test's price.
    (charge,) = first["components"]
    assert charge["id"] == "lab_charge"
    assert charge["marker_breakdown"] == {
        str(m["id"]): {"base_amount_minor": cents(m["price"]), "modifiers": []}
        for m in mine["markers"]
    }
    assert charge["marker_breakdown"]["1046"]["base_amount_minor"] == 3100
    assert first["aggregate_pricing"] == charge["pricing"]
    assert first["aggregate_pricing"] == {
        "base_amount_minor": cents(mine["price"]),
        "modifiers": [],
    }

    # A demo test with an add-on: its markers and the add-on's.
    insulin = 3300
    assert second["aggregate_pricing"]["base_amount_minor"] == cents(demo["price"]) + insulin
    assert set(second["components"][0]["marker_breakdown"]) == {
        *(str(m["id"]) for m in demo["markers"]),
        "1047",
    }
    # Markers alone, by id and by the lab's code (looked up at the ids' lab).
    assert third["aggregate_pricing"]["base_amount_minor"] == 3100 + insulin

    # The price an order of the test is answered with.
    user_id = create_user(client, team, "pricing")["user_id"]
    placed = client.post(
        "/v3/order",
        json={
            "user_id": user_id,
            "lab_test_id": mine["id"],
            "patient_details": PATIENT,
            "patient_address": ADDRESS,
        },
        headers=team.headers,
    )
    assert placed.status_code == 200, placed.text
    ordered = placed.json()["order"]["lab_test"]["price"]
    assert cents(ordered) == first["aggregate_pricing"]["base_amount_minor"]


def test_bad_estimates_are_refused_and_change_nothing(
    client: TestClient, team: Team, other_team: Team, service: Service
) -> None:
    theirs = create(client, other_team, name="Theirs")["id"]
    good = [{"add_on": {"marker_ids": [1046]}}]
    before = counts(service)
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({"order_sets": [{"lab_test_ids": [theirs]}]}, 404, f"Unknown lab test ids: {theirs}."),
        ({"order_sets": [{"add_on": {"marker_ids": [99]}}]}, 404, "Unknown marker ids: 99."),
        ({"order_sets": [{"add_on": {"marker_ids": [1046, 2001]}}]}, 422, "2 labs"),
        ({"order_sets": [{}]}, 422, "order_sets[0] names no lab test and no marker"),
        ({"order_sets": []}, 422, None),
        ({"order_sets": good, "modality": "testkit"}, 422, "does not offer testkit"),
        ({"order_sets": good, "modality": "mail"}, 422, None),
        ({"order_sets": good, "us_state": "ZZ"}, 422, "US state"),
        ({"order_sets": good, "us_state": "tx"}, 422, None),
        ({"order_sets": good, "billing": "patient_bill"}, 400, "does not bill insurance"),
        ({"order_sets": good, "billing": "barter"}, 422, None),
        ({"order_sets": good, "colour": "red"}, 422, None),
        ({"order_sets": [{"add_on": {"marker_ids": [1046]}}] * 21}, 422, None),
    ]
    for body, status, detail in cases:
        response = estimate(client, team, **body)
        assert response.status_code == status, (body, response.text)
        if detail is not None:
            found = response.json()["detail"]
            message = found if isinstance(found, str) else found[0]["msg"]
            assert detail in message, (body, message)
    assert client.post(PATH, json={"order_sets": good}).status_code == 401
    assert counts(service) == before
