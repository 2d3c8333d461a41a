"""At-home test kits (`POST /v3/order/testkit` and `/v3/order/testkit/register`, the
official client's `testkit.*`): a kit ordered for a user is a testkit order shipped to the
address given; registered by the sample id printed on it, the patient's details and
address are sealed on the order (an `Order.KitRegistered` event, announced as an order
update); a kit registers once, before its sample is with the lab; another team's sample id
is a 404. On both databases."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.queries.orders import kit_order_query
from healthledger.adapters.reference import rules_at
from healthledger.adapters.settings import Settings
from healthledger.domain.labs.orders import Order
from healthledger.domain.webhooks.announcements import ORDER_UPDATED, announcements
from vital.types import PostOrderResponse

from tests.conftest import Team, create_user
from tests.integration.test_orders import (
    ADDRESS,
    CTX,
    DEMOGRAPHICS,
    PATIENT,
    THYROID_KIT,
    WELLNESS,
    events_of,
    step,
)

SHIPPING = {**ADDRESS, "receiver_name": "Ada Lovelace", "phone_number": "+1 555 010 1815"}


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
def user(client: TestClient, team: Team, service: Service) -> str:
    """A live user of the team with demographics."""
    service.teams.set_feature(CTX, team.team_id, "demographics", True)
    user_id: str = create_user(client, team, "kits-1")["user_id"]
    recorded = client.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=team.headers)
    assert recorded.status_code == 200, recorded.text
    return user_id


def order_kit(client: TestClient, team: Team, user_id: str, **body: Any) -> Any:
    sent = {"user_id": user_id, "lab_test_id": THYROID_KIT, "shipping_details": SHIPPING, **body}
    return client.post("/v3/order/testkit", json=sent, headers=team.headers)


def shipped_kit(client: TestClient, team: Team, user_id: str) -> dict[str, Any]:
    """A kit ordered and moved to its requisition: its sample id is printed on it."""
    ordered = order_kit(client, team, user_id)
    assert ordered.status_code == 200, ordered.text
    moved = step(client, team, ordered.json()["id"])
    assert moved.status_code == 200, moved.text
    assert moved.json()["sample_id"]
    return dict(moved.json())


def register(client: TestClient, team: Team, sample_id: str, **body: Any) -> Any:
    sent = {"sample_id": sample_id, "patient_details": PATIENT, "patient_address": ADDRESS, **body}
    return client.post("/v3/order/testkit/register", json=sent, headers=team.headers)


def test_a_kit_is_a_testkit_order_shipped_to_the_address_given(
    client: TestClient, team: Team, user: str
) -> None:
    response = order_kit(client, team, user)
    assert response.status_code == 200, response.text
    body = response.json()
    PostOrderResponse.model_validate(body)
    assert body["message"] == "Test kit ordered."
    assert body["status"] == "received"
    assert body["order"]["events"][-1]["status"] == "received.testkit.ordered"
    assert body["patient_address"]["first_line"] == "1 Navy Yard"
    assert body["patient_address"]["receiver_name"] == "Ada Lovelace"
    # Until the kit is registered, the patient is the user (their demographics).
    assert body["patient_details"]["last_name"] == "Lovelace"
    assert body["passthrough"] is None


def test_a_kits_passthrough_is_kept_and_answered_and_bad_ones_are_refused(
    client: TestClient, team: Team, user: str
) -> None:
    ordered = order_kit(client, team, user, passthrough="crm-kit-4711")
    assert ordered.status_code == 200, ordered.text
    assert ordered.json()["passthrough"] == "crm-kit-4711"
    read = client.get(f"/v3/order/{ordered.json()['id']}", headers=team.headers)
    assert read.json()["passthrough"] == "crm-kit-4711"
    # Pretty-printed JSON (line breaks, tabs) is kept as sent; other controls are not.
    pretty = '{\n  "crm": "kit-4711",\n\t"visit": 4\r\n}'
    ordered = order_kit(client, team, user, passthrough=pretty)
    assert ordered.status_code == 200, ordered.text
    read = client.get(f"/v3/order/{ordered.json()['id']}", headers=team.headers)
    assert ordered.json()["passthrough"] == read.json()["passthrough"] == pretty
    for bad in ("crm\x00kit", "crm\x1b[31mkit", "crm\u202ekit", "x" * 4097, 42):
        refused = order_kit(client, team, user, passthrough=bad)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "passthrough"]
        assert refused.json()["detail"][0]["input"] == "[redacted]"


def test_a_kit_registered_by_its_sample_id_seals_its_patient(
    service: Service, client: TestClient, team: Team, user: str
) -> None:
    kit = shipped_kit(client, team, user)
    response = register(client, team, kit["sample_id"], user_id=user)
    assert response.status_code == 200, response.text
    body = response.json()
    PostOrderResponse.model_validate(body)
    assert body["id"] == kit["id"] and body["message"] == "Test kit registered."
    assert body["patient_details"]["last_name"] == "Hopper"
    assert body["patient_address"]["first_line"] == "1 Navy Yard"
    # The order's read agrees, and the registration is one event, sealed, announced.
    read = client.get(f"/v3/order/{kit['id']}", headers=team.headers).json()
    assert read["patient_details"]["first_name"] == "Grace"
    registered = events_of(service, kit["id"])[-1]
    assert isinstance(registered, Order.KitRegistered)
    assert "Hopper" not in registered.sealed_patient_details
    order = service.ledger.find(UUID(kit["id"]))
    found = announcements(registered, order, rules_at(registered.timestamp))
    assert [a.event_type for a in found] == [ORDER_UPDATED]
    # The status is unchanged; the kit moves on as any order.
    assert read["status"] == kit["status"]
    assert step(client, team, kit["id"]).status_code == 200


def test_a_kit_registers_once_and_before_the_lab_has_its_sample(
    client: TestClient, team: Team, user: str
) -> None:
    kit = shipped_kit(client, team, user)
    assert register(client, team, kit["sample_id"]).status_code == 200
    again = register(client, team, kit["sample_id"])
    assert again.status_code == 409 and "registered already" in again.json()["detail"]

    late = shipped_kit(client, team, user)
    while step(client, team, late["id"]).json()["status"] != "sample_with_lab":
        pass
    refused = register(client, team, late["sample_id"])
    assert refused.status_code == 409 and "before its sample" in refused.json()["detail"]


def test_bad_input_other_users_and_other_teams(
    client: TestClient, team: Team, other_team: Team, user: str
) -> None:
    kit = shipped_kit(client, team, user)
    other_user = create_user(client, team, "kits-2")["user_id"]
    wrong_user = register(client, team, kit["sample_id"], user_id=other_user)
    assert wrong_user.status_code == 422, wrong_user.text
    assert register(client, other_team, kit["sample_id"]).status_code == 404
    assert register(client, team, "0000000000").status_code == 404
    insured = register(client, team, kit["sample_id"], health_insurance={"payor_code": "X"})
    assert insured.status_code == 400 and "insurance" in insured.json()["detail"]
    missing = register(client, team, kit["sample_id"], patient_details=None)
    assert missing.status_code == 422
    # A walk-in test's sample id is no kit's.
    walk_in = client.post(
        "/v3/order", json={"user_id": user, "lab_test_id": WELLNESS}, headers=team.headers
    ).json()
    walk_in = step(client, team, walk_in["id"]).json()
    assert register(client, team, walk_in["sample_id"]).status_code == 404
    # Ordering: a lab test whose lab sends no kits, a bad zip code, another team's user.
    not_a_kit = order_kit(client, team, user, lab_test_id=WELLNESS)
    assert not_a_kit.status_code == 422, not_a_kit.text
    bad_zip = order_kit(client, team, user, shipping_details={**SHIPPING, "zip": "00000"})
    assert bad_zip.status_code == 422
    assert order_kit(client, other_team, user).status_code == 404
    # Nothing was registered by the refusals.
    read = client.get(f"/v3/order/{kit['id']}", headers=team.headers).json()
    assert read["patient_details"]["last_name"] == "Lovelace"


def test_a_kit_is_found_by_the_index_on_its_sample_id(service: Service, team: Team) -> None:
    """A kit's registration looks its order up through (team_id, sample_id), not by
    reading every order of the team (revision 0031)."""
    query = kit_order_query(team.team_id, "0123456789")
    with service.db.read() as conn:
        sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if service.db.is_sqlite:
            plan = [row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            assert any("ix_orders_team_sample" in step for step in plan), plan
        else:
            # Sequential scans priced out: what is left is the plan through an index, if
            # there is one (an empty table would be scanned whatever the indexes).
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = [row[0] for row in conn.exec_driver_sql(f"EXPLAIN {sql}")]
            assert "ix_orders_team_sample" in "\n".join(plan), plan
