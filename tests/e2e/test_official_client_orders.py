"""Lab test orders through the official Python client `vital==2.1.569` (issue 14,
docs/compatibility.md): the real team API under uvicorn, each call's answer parsed by the
client's models (`PostOrderResponse`, `ClientFacingOrder`, `GetOrdersResponse`,
`LabResultsRaw`), its values checked (a priority order with diagnoses and a passthrough
string among them), and its errors raised as the client's error types. On both
databases."""

from __future__ import annotations

import uuid

import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.labs.sandbox import SandboxPolicy
from vital.core.api_error import ApiError
from vital.errors import UnprocessableEntityError
from vital.types import (
    ClientFacingOrder,
    Gender,
    GetOrdersResponse,
    Interpretation,
    LabResultsRaw,
    OrderLowLevelStatus,
    PatientAddressWithValidation,
    PatientDetailsWithValidation,
    PostOrderResponse,
    SimulationFlags,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS

pytestmark = CLIENTS_PARSE_ANSWERS

WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # a shared demo test: Quest, walk-in
PATIENT = PatientDetailsWithValidation(
    first_name="Grace",
    last_name="Hopper",
    dob="1956-12-09",
    gender=Gender("female"),
    phone_number="+1 555 010 1906",
    email="grace.hopper@example.org",
)
ADDRESS = PatientAddressWithValidation(
    first_line="1 Navy Yard", city="Washington", state="DC", zip="20374", country="US"
)


def test_orders_through_the_official_client(
    api: vital.Vital,
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every order runs its whole course here (the simulated lab fails or cancels none).
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    user_id = api.user.create(client_user_id="orders-oc").user_id
    created = api.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT,
        patient_address=ADDRESS,
        idempotency_key="oc-order-1",
    )
    assert isinstance(created, PostOrderResponse)
    order = created.order
    assert (order.user_id, order.lab_test.id) == (user_id, WELLNESS)
    assert order.status is not None and order.status.value == "received"
    assert [e.status.value for e in order.events] == ["received.walk_in_test.ordered"]
    assert order.patient_details is not None and order.patient_details.last_name == "Hopper"
    assert order.patient_address is not None and order.patient_address.zip == "20374"
    assert order.lab_test.lab is not None and order.lab_test.lab.slug == "quest"
    # The same key and body: the same order.
    again = api.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT,
        patient_address=ADDRESS,
        idempotency_key="oc-order-1",
    )
    assert again.order.id == order.id

    got = api.lab_tests.get_order(order.id)
    assert isinstance(got, ClientFacingOrder) and got.id == order.id

    # Moved by the sandbox, a step per call, to a critical result.
    while True:
        api.lab_tests.simulate_order_process(
            order.id, request=SimulationFlags(interpretation=Interpretation.CRITICAL)
        )
        current = api.lab_tests.get_order(order.id)
        assert current.status is not None
        if current.status.value == "completed":
            break
    assert current.interpretation is not None and current.interpretation.value == "critical"
    assert len(current.events) == 5 and current.sample_id
    results = api.lab_tests.get_result_raw(order.id)
    assert isinstance(results, LabResultsRaw)
    assert results.metadata.patient == "Grace Hopper"
    assert results.metadata.specimen_number == current.sample_id
    assert isinstance(results.results, list) and results.results
    interpretations = [r.interpretation for r in results.results]
    assert interpretations.count("critical") == 1

    # A priority order with diagnoses and the team's own string: each answered as placed
    # (the codes in their dotted form, each once), by create, get and the listing.
    second = api.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT,
        patient_address=ADDRESS,
        priority=True,
        icd_codes=["e119", "Z13.1", "E11.9"],
        passthrough='{"crm": "visit-4711"}',
    )
    assert second.order.priority is True
    assert second.order.icd_codes == ["E11.9", "Z13.1"]
    assert second.order.passthrough == '{"crm": "visit-4711"}'
    read = api.lab_tests.get_order(second.order.id)
    assert (read.priority, read.icd_codes, read.passthrough) == (
        True,
        ["E11.9", "Z13.1"],
        '{"crm": "visit-4711"}',
    )
    # The first order was placed without them.
    assert (current.priority, current.icd_codes, current.passthrough) == (False, None, None)
    cancelled = api.lab_tests.cancel_order(second.order.id)
    assert cancelled.order.status is not None and cancelled.order.status.value == "cancelled"
    assert cancelled.order.icd_codes == ["E11.9", "Z13.1"]

    page = api.lab_tests.get_orders(user_id=user_id, page=1, size=10)
    assert isinstance(page, GetOrdersResponse)
    assert (page.total, page.page, page.size) == (2, 1, 10)
    assert [o.id for o in page.orders] == [second.order.id, order.id]
    done = api.lab_tests.get_orders(
        status=OrderLowLevelStatus.COMPLETED, interpretation=Interpretation.CRITICAL
    )
    assert [o.id for o in done.orders] == [order.id]


def test_order_errors_parse_as_the_clients_error_types(
    api: vital.Vital,
) -> None:
    user_id = api.user.create(client_user_id="orders-errors").user_id
    with pytest.raises(ApiError) as unknown:
        api.lab_tests.get_order(str(uuid.uuid4()))
    assert unknown.value.status_code == 404
    with pytest.raises(ApiError) as no_test:
        api.lab_tests.create_order(
            user_id=user_id,
            lab_test_id=str(uuid.uuid4()),
            patient_details=PATIENT,
            patient_address=ADDRESS,
        )
    assert no_test.value.status_code == 404
    order = api.lab_tests.create_order(
        user_id=user_id, lab_test_id=WELLNESS, patient_details=PATIENT, patient_address=ADDRESS
    ).order
    with pytest.raises(ApiError) as not_ready:
        api.lab_tests.get_result_raw(order.id)
    assert not_ready.value.status_code == 409
    with pytest.raises(ApiError) as reused:
        for lab_test in (WELLNESS, "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02"):
            api.lab_tests.create_order(
                user_id=user_id,
                lab_test_id=lab_test,
                patient_details=PATIENT,
                patient_address=ADDRESS,
                idempotency_key="oc-reused",
            )
    assert reused.value.status_code == 409
    with pytest.raises(UnprocessableEntityError):
        api.lab_tests.get_orders(size=101)
    # Diagnoses that cannot be placed: a category, an Excludes1 pair; the refusal names
    # the codes, never the passthrough sent with them. And a control character in it.
    for codes, named in ((["E11"], "E11 is a category"), (["E10.9", "E11.9"], "E10.9 and E11.9")):
        with pytest.raises(UnprocessableEntityError) as refused:
            api.lab_tests.create_order(
                user_id=user_id,
                lab_test_id=WELLNESS,
                patient_details=PATIENT,
                patient_address=ADDRESS,
                icd_codes=codes,
                passthrough="note-for-crm-only",
            )
        assert named in str(refused.value.body)
        assert "note-for-crm-only" not in str(refused.value.body)
    with pytest.raises(UnprocessableEntityError):
        api.lab_tests.create_order(
            user_id=user_id,
            lab_test_id=WELLNESS,
            patient_details=PATIENT,
            patient_address=ADDRESS,
            passthrough="bell\x07",
        )
