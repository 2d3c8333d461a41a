"""Lab test orders through the newer official client, `junction-api-sdk` 2.0.0 (issue 33's
finding: it could not read an order at all, `ClientFacingOrder.last_event` being required),
with only its base_url changed: create, get, list and cancel parse with its models (a
priority order with diagnoses and a passthrough string among them). On both databases."""

from __future__ import annotations

import junction
import pytest
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy
from junction.errors import UnprocessableEntityError
from junction.types import ClientFacingOrder, GetOrdersResponse, PostOrderResponse

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT, WELLNESS

pytestmark = CLIENTS_PARSE_ANSWERS


def test_orders_through_the_junction_client(
    base_url: str, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    user_id = client.user.create(client_user_id="orders-junction").user_id
    created = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
    )
    assert isinstance(created, PostOrderResponse)
    order = created.order
    assert order.last_event.status.value == "received.walk_in_test.ordered"
    assert order.last_event == order.events[-1]
    client.lab_tests.simulate_order_process(order.id)
    got = client.lab_tests.get_order(order.id)
    assert isinstance(got, ClientFacingOrder)
    assert got.last_event == got.events[-1] and len(got.events) == 2
    page = client.lab_tests.get_orders(user_id=user_id)
    assert isinstance(page, GetOrdersResponse) and [o.id for o in page.orders] == [order.id]
    cancelled = client.lab_tests.cancel_order(order.id)
    assert cancelled.order.last_event.status.value.startswith("cancelled")
    assert (order.priority, order.icd_codes, order.passthrough) == (False, None, None)
    # A priority order with diagnoses and the team's own string, answered as placed.
    placed = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
        priority=True,
        icd_codes=["E78.5", "z0000"],
        passthrough="crm:visit-4712",
    ).order
    assert (placed.priority, placed.icd_codes, placed.passthrough) == (
        True,
        ["E78.5", "Z00.00"],
        "crm:visit-4712",
    )
    read = client.lab_tests.get_order(placed.id)
    assert (read.priority, read.icd_codes, read.passthrough) == (
        True,
        ["E78.5", "Z00.00"],
        "crm:visit-4712",
    )
    with pytest.raises(UnprocessableEntityError) as refused:
        client.lab_tests.create_order(
            user_id=user_id,
            lab_test_id=WELLNESS,
            patient_details=PATIENT.model_dump(),
            patient_address=ADDRESS.model_dump(),
            icd_codes=["R73.03", "E11.9"],
        )
    assert "R73.03 and E11.9" in str(refused.value.body)
