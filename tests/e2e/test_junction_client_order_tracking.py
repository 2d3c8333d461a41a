"""An order's activation date and its tracking through the newer official client,
`junction-api-sdk` 2.0.0, with only its base_url changed (issue 33): `create_order` with
`activate_by`, `update_order` moving and clearing it (and its 400s), and
`get_order_tracking`, each answer parsed by the client's models. On both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import junction
import pytest
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy
from junction.core.api_error import ApiError
from junction.types import OrderTracking, PostOrderResponse

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT, WELLNESS

pytestmark = CLIENTS_PARSE_ANSWERS


def test_activation_and_tracking_through_the_junction_client(
    base_url: str, team: Team, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    user_id = client.user.create(client_user_id="tracking-junction").user_id
    today = datetime.now(UTC).date()
    in_three_days = (today + timedelta(days=3)).isoformat()
    created = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
        activate_by=in_three_days,
    )
    assert isinstance(created, PostOrderResponse)
    order_id = created.order.id
    assert created.order.activate_by == in_three_days
    in_five_days = (today + timedelta(days=5)).isoformat()
    moved = client.lab_tests.update_order(order_id, activate_by=in_five_days)
    assert isinstance(moved, PostOrderResponse) and moved.order.activate_by == in_five_days
    with pytest.raises(ApiError) as past:
        client.lab_tests.update_order(order_id, activate_by=(today - timedelta(days=1)).isoformat())
    assert past.value.status_code == 400 and "in the past" in str(past.value.body)

    tracked = client.lab_tests.get_order_tracking(order_id)
    assert isinstance(tracked, OrderTracking) and tracked.order_id == order_id
    estimate = tracked.expected_at.final_results
    assert estimate.current_estimate is not None and estimate.original_estimate is not None
    assert estimate.current_estimate.date() > estimate.original_estimate.date()
    assert [u.reason for u in tracked.updates] == [f"activate_by: {in_five_days}"]
    assert tracked.updates[0].source.value == "junction"
    assert {m.status.value for m in tracked.markers} == {"pending"} and tracked.markers
    assert tracked.collected_at is None

    cleared = client.lab_tests.update_order(order_id, activate_by=None)
    assert cleared.order.activate_by is None and cleared.message == "Order dispatched now."
    # Dispatched now: the lab's first step takes the order out of `ordered`.
    client.lab_tests.simulate_order_process(order_id)
    assert client.lab_tests.get_order(order_id).last_event.status.value.endswith(
        "requisition_created"
    )
    with pytest.raises(ApiError) as dispatched:
        client.lab_tests.update_order(order_id, activate_by=in_five_days)
    assert dispatched.value.status_code == 400
    updates = client.lab_tests.get_order_tracking(order_id).updates
    assert [u.source.value for u in updates] == ["junction", "junction", "junction"]
    with pytest.raises(ApiError) as unknown:
        client.lab_tests.get_order_tracking("00000000-0000-4000-8000-000000000000")
    assert unknown.value.status_code == 404
