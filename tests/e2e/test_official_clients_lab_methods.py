"""Issue 33's documents and the rest of the lab methods through both official clients,
`vital` 2.1.569 and `junction-api-sdk` 2.0.0, against the team API under uvicorn: each
method's answer parsed by the client's own models (the PDFs read as the clients stream
them), its values checked, and the insurance methods' refusal raised as the client's error.
On both databases."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import junction
import junction.types as junction_types
import pytest
import vital
import vital.types as vital_types
from healthledger.adapters.composition import Service
from healthledger.domain.labs.documents import requisition_number
from healthledger.domain.labs.sandbox import SandboxPolicy
from junction.core.api_error import ApiError as JunctionApiError
from vital.core.api_error import ApiError as VitalApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.test_official_client_orders import ADDRESS, PATIENT, WELLNESS

pytestmark = CLIENTS_PARSE_ANSWERS

QUEST = 1


@pytest.fixture(params=["vital", "junction"])
def client(request: pytest.FixtureRequest, base_url: str, team: Team) -> Any:
    """Each official client as customers construct it: the key and our base_url."""
    if request.param == "vital":
        return vital.Vital(api_key=team.key, base_url=base_url, timeout=60)
    return junction.Junction(api_key=team.key, base_url=base_url, timeout=60)


def pdf_text(chunks: Iterator[bytes], tmp_path: Path, name: str) -> str:
    pdf = b"".join(chunks)
    assert pdf.startswith(b"%PDF-"), name
    path = tmp_path / f"{name}.pdf"
    path.write_bytes(pdf)
    text = subprocess.run(
        ["pdftotext", str(path), "-"], capture_output=True, check=True, text=True
    ).stdout
    return " ".join(text.split())


def refusal(call: Callable[[], Any]) -> tuple[int | None, Any]:
    """The status and body of the error either client raises for `call`."""
    with pytest.raises((VitalApiError, JunctionApiError)) as raised:
        call()
    error = raised.value
    assert isinstance(error, (VitalApiError, JunctionApiError))
    return error.status_code, error.body


def test_documents_and_lab_methods_through_both_clients(
    client: Any,
    service: Service,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        service.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    types = vital_types if isinstance(client, vital.Vital) else junction_types
    user_id = client.user.create(client_user_id=f"lab-methods-{type(client).__name__}").user_id
    order = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=WELLNESS,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
    ).order
    number = requisition_number(UUID(order.id))

    # The collection papers, before the results.
    papers = {
        "requisition": client.lab_tests.get_order_requistion_pdf(order.id),
        "labels": client.lab_tests.get_labels_pdf(
            order.id,
            collection_date=dt.datetime(2026, 3, 11, 8, 30, tzinfo=dt.UTC),
            number_of_labels=2,
        ),
        "abn": client.lab_tests.get_order_abn_pdf(order.id),
        "instructions": client.lab_tests.get_order_collection_instruction_pdf(order.id),
    }
    for name, chunks in papers.items():
        text = pdf_text(chunks, tmp_path, name)
        assert "Grace Hopper" in text and number in text and "Quest Diagnostics" in text, name
    lab_test_text = pdf_text(
        client.lab_tests.get_lab_test_collection_instruction_pdf(WELLNESS), tmp_path, "test"
    )
    assert "Annual Wellness" in lab_test_text and "Grace" not in lab_test_text

    # The results, their metadata and their report.
    while client.lab_tests.get_order(order.id).status.value != "completed":
        client.lab_tests.simulate_order_process(order.id)
    metadata = client.lab_tests.get_result_metadata(order.id)
    assert isinstance(metadata, types.LabResultsMetadata)
    assert metadata.patient == "Grace Hopper" and metadata.specimen_number == number
    raw = client.lab_tests.get_result_raw(order.id)
    assert isinstance(raw, types.LabResultsRaw) and raw.metadata == metadata
    report = pdf_text(client.lab_tests.get_result_pdf(order.id), tmp_path, "report")
    first = raw.results[0] if isinstance(raw.results, list) else None
    assert first is not None and first.name in report and str(first.result) in report

    # Lab tests a cursor page at a time, and a marker by its lab's code.
    page = client.lab_tests.get_paginated(lab_test_limit=3)
    assert isinstance(page, types.LabTestResourcesResponse)
    assert len(page.data) == 3 and page.next_cursor is not None
    rest = client.lab_tests.get_paginated(lab_test_limit=3, next_cursor=page.next_cursor)
    assert [t.id for t in page.data + rest.data] == [t.id for t in client.lab_tests.get()]
    marker = client.lab_tests.get_markers_by_lab_and_provider_id("7600", QUEST)
    assert isinstance(marker, types.ClientFacingMarker)
    assert (marker.id, marker.name) == (1079, "Lipid Panel")

    # ICD-10-CM.
    valid = client.lab_tests.validate_icd_codes(codes=["E11.9", "E78.5"])
    assert isinstance(valid, types.ValidateIcdCodesResponse) and valid.valid
    excluded = client.lab_tests.validate_icd_codes(codes=["E11.9", "E08.9"])
    assert not excluded.valid
    assert {(v.code, v.conflicts_with) for v in excluded.violations} >= {("E11.9", "E08.9")}
    diagnoses = client.insurance.search_diagnosis(diagnosis_query="essential hypertension")
    assert "I10" in {d.diagnosis_code for d in diagnoses}

    # An order placed outside, imported with its sample id.
    imported = client.lab_tests.import_order(
        user_id=user_id,
        billing_type="client_bill",
        order_set=types.OrderSetRequest(lab_test_ids=[WELLNESS]),
        collection_method="walk_in_test",
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
        sample_id="EXT-42",
    )
    assert isinstance(imported, types.PostOrderResponse)
    assert imported.order.sample_id == "EXT-42"
    assert imported.order.events[-1].status.value == "received.walk_in_test.requisition_created"

    # The order's webhooks sent again (none registered: no order had one).
    resent = client.order.resend_events(order_ids=[order.id])
    assert isinstance(resent, types.ResendWebhookResponse) and resent.order_ids == []

    # On-site draws: a walk-in order is not one.
    status, _ = refusal(
        lambda: client.lab_tests.update_on_site_collection_order_draw_completed(order.id)
    )
    assert status == 400

    # Insurance and payors: a clear refusal.
    for call in (
        lambda: client.lab_tests.create_order(
            user_id=user_id,
            lab_test_id=WELLNESS,
            patient_details=PATIENT.model_dump(),
            patient_address=ADDRESS.model_dump(),
            billing_type="commercial_insurance",
        ),
        lambda: client.insurance.search_get_payor_info(insurance_name="Aetna"),
        lambda: client.insurance.search_payor_info(insurance_name="Aetna"),
        lambda: client.payor.create_payor(
            name="Aetna",
            address=types.Address(
                first_line="151 Farmington Ave",
                country="US",
                zip="06156",
                city="Hartford",
                state="CT",
            ),
        ),
    ):
        status, body = refusal(call)
        assert status == 400 and "does not bill insurance" in body["detail"]


def test_update_lab_test_through_both_clients(client: Any) -> None:
    """`update_lab_test`: a rename, a deactivation that the next order meets as a 409 and
    every read shows, a reactivation; the client's 422 for a blank name; another
    team's-or-unknown test a 404."""
    types = vital_types if isinstance(client, vital.Vital) else junction_types
    made = client.lab_tests.create(
        name="Client panel", method="walk_in_test", marker_ids=[1046], description="HbA1c."
    )
    renamed = client.lab_tests.update_lab_test(made.id, name="Client panel, renamed")
    assert isinstance(renamed, types.ClientFacingLabTest)
    assert (renamed.name, renamed.is_active, renamed.status.value) == (
        "Client panel, renamed",
        True,
        "active",
    )
    off = client.lab_tests.update_lab_test(made.id, active=False)
    assert (off.name, off.is_active, off.status.value) == (renamed.name, False, "inactive")
    assert client.lab_tests.get_by_id(made.id) == off
    assert [t.id for t in client.lab_tests.get(status="inactive")] == [made.id]

    user_id = client.user.create(client_user_id=f"update-lab-test-{type(client).__name__}").user_id
    status, body = refusal(
        lambda: client.lab_tests.create_order(
            user_id=user_id,
            lab_test_id=made.id,
            patient_details=PATIENT.model_dump(),
            patient_address=ADDRESS.model_dump(),
        )
    )
    assert status == 409 and "is inactive" in body["detail"]

    on = client.lab_tests.update_lab_test(made.id, active=True)
    assert (on.is_active, on.status.value) == (True, "active")
    placed = client.lab_tests.create_order(
        user_id=user_id,
        lab_test_id=made.id,
        patient_details=PATIENT.model_dump(),
        patient_address=ADDRESS.model_dump(),
    )
    assert placed.order.lab_test.name == "Client panel, renamed"

    # The client's own 422 error, its body parsed as its HttpValidationError (whose
    # detail it leaves as the JSON it was).
    status, body = refusal(lambda: client.lab_tests.update_lab_test(made.id, name="  "))
    assert isinstance(body, types.HttpValidationError) and status == 422
    assert body.detail[0]["loc"] == ["body", "name"]
    assert body.detail[0]["msg"].endswith("must not be blank")
    unknown = "5a1f0000-0000-4000-8000-000000000000"
    status, _ = refusal(lambda: client.lab_tests.update_lab_test(unknown, active=False))
    assert status == 404


def test_estimate_order_set_pricing_through_junction(base_url: str, team: Team) -> None:
    """junction-api-sdk's `estimate_order_set_pricing` (vital 2.1.569 has no such call):
    parsed by its own models, priced as the lab test is."""
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=60)
    test = client.lab_tests.get_by_id(WELLNESS)
    estimate = client.lab_tests.estimate_order_set_pricing(
        order_sets=[
            junction_types.OrderSetRequest(lab_test_ids=[WELLNESS]),
            junction_types.OrderSetRequest(
                add_on=junction_types.AddOnOrder(marker_ids=[1046], provider_ids=["561"])
            ),
        ],
        modality="walk_in_test",
        us_state="NY",
        billing="client_bill",
    )
    assert isinstance(estimate, junction_types.EstimateOrderSetPricingResponse)
    whole, markers = estimate.data
    assert isinstance(
        whole.aggregate_pricing, junction_types.SpecifiedPricingComponentPricingConditions
    )
    assert whole.aggregate_pricing.base_amount_minor == round(test.price * 100)
    (charge,) = whole.components
    assert isinstance(charge, junction_types.LabChargePricingComponent)
    assert charge.marker_breakdown is not None
    assert set(charge.marker_breakdown) == {str(m.id) for m in test.markers or []}
    specified = junction_types.SpecifiedPricingComponentPricingConditions
    assert isinstance(markers.aggregate_pricing, specified)
    assert markers.aggregate_pricing.base_amount_minor == 3100 + 3300  # HbA1c and insulin
    status, body = refusal(
        lambda: client.lab_tests.estimate_order_set_pricing(
            order_sets=[junction_types.OrderSetRequest(lab_test_ids=[WELLNESS])],
            modality="testkit",
            us_state="NY",
        )
    )
    assert status == 422 and "does not offer testkit" in body.detail[0]["msg"]
