"""Request and response models of the lab test order routes (issue 14; gaps.md Orders).

Answers are supersets of the spec's order (`{id, user_id, lab_test, status,
interpretation, created_at, updated_at, events}`) and of the official client's models
(`ClientFacingOrder`, `PostOrderResponse`, `GetOrdersResponse`, `LabResultsRaw`), so that
the client parses every one (docs/compatibility.md).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from healthledger.adapters.operations.schemas import ErasedValue
from healthledger.adapters.reference import icd10
from healthledger.adapters.reference.labs.areas import ZIP_CODE, zip_centroids
from healthledger.domain.free_text import NO_CONTROL_CHARACTERS_BUT_LINE_BREAKS
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

CollectionMethod = Literal["testkit", "walk_in_test", "at_home_phlebotomy", "on_site_collection"]
Interpretation = Literal["normal", "abnormal", "critical"]
# The longest passthrough an order keeps (the team's own string, sealed on the order).
MAX_PASSTHROUGH_LENGTH = 4096


# The team's own string on an order (`POST /v3/order`, `POST /v3/order/testkit`): free text
# that may span lines (teams keep pretty-printed JSON in it; it is sealed, never logged nor
# printed), no other control characters; the length before the check, so that a refusal
# says "characters" as for any string.
Passthrough = Annotated[
    str, Field(max_length=MAX_PASSTHROUGH_LENGTH), NO_CONTROL_CHARACTERS_BUT_LINE_BREAKS
]
PASSTHROUGH_DESCRIPTION = (
    "Your own string, echoed back in the order's answers (at most 4096 characters; line "
    "breaks and tabs allowed, no other control characters); sealed with the user's key."
)


class OrderPatientAddress(PatientAddress):
    """The patient's address of an order: the labs are US labs, so its zip code is checked
    as area info checks one (`/v3/order/area/info`): five digits or ZIP+4, and an active
    US Postal Service zip code (the `zipcodes` data)."""

    @field_validator("zip_code")
    @classmethod
    def _us_zip_code(cls, value: str) -> str:
        if not re.fullmatch(ZIP_CODE, value, re.ASCII):  # ASCII digits only
            raise ValueError("zip_code must be a US zip code: five digits, or ZIP+4.")
        if value[:5] not in zip_centroids():
            raise ValueError("zip_code is well-formed but is not an existing US zip code.")
        return value


class OrderCreate(BaseModel):
    """`POST /v3/order`: the lab test to order for a user; the collection method defaults
    to the lab test's, the patient's details and address to the user's demographics."""

    model_config = ConfigDict(extra="forbid")
    user_id: UUID = Field(description="The user the order is for.")
    lab_test_id: UUID = Field(description="The team's lab test, or a shared demo test.")
    collection_method: CollectionMethod | None = None
    patient_details: PatientDetails | None = None
    patient_address: OrderPatientAddress | None = None
    # Accepted so that a request naming them gets the reason it is refused (a 400: this
    # deployment bills the team only, domain/labs/billing.py), not "extra inputs".
    billing_type: (
        Literal["client_bill", "commercial_insurance", "patient_bill_passthrough", "patient_bill"]
        | None
    ) = Field(
        default=None, description="Only client_bill: this deployment does not bill insurance."
    )
    health_insurance: dict[str, Any] | None = Field(
        default=None, description="Refused: this deployment does not bill insurance."
    )
    activate_by: date | None = Field(
        default=None,
        description="The day (YYYY-MM-DD, UTC; today or within a year) to dispatch the order "
        "to the lab: it waits in `ordered` until then. Null or left out: at once.",
    )
    # JSON true or false only: a "yes" or a 1 is refused rather than guessed at.
    priority: StrictBool | None = Field(
        default=None, description="A priority (STAT) order. Null or left out: false."
    )
    icd_codes: (
        list[Annotated[str, Field(min_length=1, max_length=icd10.MAX_CODE_LENGTH)]] | None
    ) = Field(
        default=None,
        max_length=icd10.MAX_CODES,
        description="The diagnoses, ICD-10-CM codes (at most 50): each billable and no two "
        "in an Excludes1 conflict, as POST /v3/insurance/validate_icd_codes checks them. "
        "Kept in their dotted form (e119 -> E11.9), each once; sealed with the user's key.",
    )
    passthrough: Passthrough | None = Field(default=None, description=PASSTHROUGH_DESCRIPTION)

    @field_validator("icd_codes")
    @classmethod
    def _codable_together(cls, value: list[str] | None) -> list[str] | None:
        """The codes as `validate_icd_codes` judges them; the refusal names codes only."""
        if not value:
            return None
        found = icd10.validate(value)
        refusal = found.refusal()
        if refusal is not None:
            raise ValueError(refusal)
        return found.codes


class OrderActivation(BaseModel):
    """`PATCH /v3/order/{id}` (the client's `update_order`): the new day to dispatch an
    order placed with `activate_by`, or null to dispatch it now."""

    model_config = ConfigDict(extra="forbid")
    activate_by: date | None = Field(
        description="YYYY-MM-DD (UTC), today or within a year; null: dispatch now."
    )


class SimulationFlags(BaseModel):
    """`POST /v3/order/{id}/test`'s optional body (the client's SimulationFlags): the
    outcome the results come out with, if this step reports them."""

    model_config = ConfigDict(extra="forbid")
    interpretation: Interpretation | None = None


# -- answers -------------------------------------------------------------------------------

_LAB_EXAMPLE = {
    "id": 1,
    "slug": "quest",
    "name": "Quest Diagnostics",
    "first_line_address": "500 Plaza Drive",
    "city": "Secaucus",
    "zipcode": "07094",
    "collection_methods": ["walk_in_test", "at_home_phlebotomy"],
    "sample_types": ["serum"],
}
_MARKER_EXAMPLE = {
    "id": 101,
    "name": "Hemoglobin A1c",
    "slug": "hemoglobin-a1c",
    "description": "Average blood glucose over about three months.",
    "lab_id": 1,
    "provider_id": "496",
    "type": "biomarker",
    "unit": "%",
    "price": "15.00",
    "a_la_carte_enabled": True,
}
_AT = "2026-03-01T12:00:00Z"
ORDER_EXAMPLE: dict[str, Any] = {
    "id": "7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b",
    "user_id": "5f0c2d1e-8a7b-4c6d-9e0f-1a2b3c4d5e6f",
    "team_id": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    "patient_details": {
        "first_name": "Alex",
        "last_name": "Example",
        "email": "alex.example@example.org",
        "phone_number": "+1 555 0100",
        "gender": "female",
        "dob": "1990-04-12",
    },
    "patient_address": {
        "first_line": "1 Example Street",
        "second_line": None,
        "zip_code": "12345",
        "zip": "12345",
        "country": "US",
        "state": "CA",
        "city": "Springfield",
    },
    "lab_test": {
        "id": "3e4f5a6b-7c8d-4e9f-8a0b-1c2d3e4f5a6b",
        "slug": "diabetes_check",
        "name": "Diabetes check",
        "sample_type": "serum",
        "method": "walk_in_test",
        "price": 15.0,
        "is_active": True,
        "status": "active",
        "fasting": False,
        "lab": _LAB_EXAMPLE,
        "markers": [_MARKER_EXAMPLE],
        "is_delegated": False,
        "auto_generated": False,
    },
    "details": {
        "type": "walk_in_test",
        "data": {
            "id": "9b8a7c6d-5e4f-5a3b-9c2d-1e0f9a8b7c6d",
            "created_at": _AT,
            "updated_at": "2026-03-01T12:01:00Z",
            "appointment_id": None,  # booked: the appointment's id
        },
    },
    "sample_id": "0123456789",
    "notes": None,
    "created_at": _AT,
    "updated_at": "2026-03-01T12:01:00Z",
    "events": [
        {"id": 1, "created_at": _AT, "status": "received.walk_in_test.ordered"},
        {
            "id": 2,
            "created_at": "2026-03-01T12:01:00Z",
            "status": "received.walk_in_test.requisition_created",
        },
    ],
    "last_event": {
        "id": 2,
        "created_at": "2026-03-01T12:01:00Z",
        "status": "received.walk_in_test.requisition_created",
    },
    "status": "received",
    "detailed_status": "received.walk_in_test.requisition_created",
    "interpretation": None,
    "has_missing_results": None,
    "health_insurance_id": None,
    "requisition_form_url": "https://api.example.org/v3/order/7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b"
    "/requisition/pdf",
    "priority": False,
    "activate_by": None,
    "passthrough": "crm-visit-4711",
    "billing_type": "client_bill",
    "icd_codes": ["E11.9"],
    "has_abn": False,
    "expected_result_by_date": "2026-03-04",
    "worst_case_result_by_date": "2026-03-04",
}


class LabAnswer(BaseModel):
    id: int
    slug: str
    name: str
    first_line_address: str
    city: str
    zipcode: str
    collection_methods: list[str]
    sample_types: list[str]


class MarkerAnswer(BaseModel):
    id: int
    name: str
    slug: str
    description: str | None = None
    lab_id: int | None = None
    provider_id: str | None = None
    type: str | None = None
    unit: str | None = None
    price: str | None = None
    a_la_carte_enabled: bool | None = None


class OrderedLabTest(BaseModel):
    """The lab test ordered (the client's ClientFacingLabTest)."""

    id: str
    slug: str
    name: str
    sample_type: str
    method: str
    price: float
    is_active: bool
    status: str
    fasting: bool | None = None
    lab: LabAnswer | None = None
    markers: list[MarkerAnswer] | None = None
    is_delegated: bool | None = None
    auto_generated: bool | None = None


class PatientDetailsAnswer(BaseModel):
    """The patient's details as recorded (the client's ClientFacingPatientDetailsCompatible)."""

    model_config = ConfigDict(extra="allow")
    first_name: str | None = None
    last_name: str | None = None
    dob: date | ErasedValue
    gender: str
    phone_number: str | None = None
    email: str | None = None


class PatientAddressAnswer(BaseModel):
    """The patient's address: the spec's `zip_code`, the client's `zip` and `country`."""

    model_config = ConfigDict(extra="allow")
    first_line: str
    second_line: str | None = None
    zip_code: str
    zip: str
    country: str
    state: str
    city: str


class OrderDetailsData(BaseModel):
    id: str
    created_at: datetime
    updated_at: datetime
    appointment_id: str | None = None


class OrderDetails(BaseModel):
    """How the sample is collected (`type`: the collection method)."""

    type: str
    data: OrderDetailsData | None = None


class OrderEvent(BaseModel):
    """One status the order had: `<top level>.<method>.<low level>`, and when."""

    id: int
    created_at: datetime
    status: str


_ERASED = (
    "A past answer (`as_of`) shows a value erased since as `<personal data: erased>` (in "
    "each member of the patient's details and address)."
)


class OrderAnswer(BaseModel):
    """A lab test order (gaps.md Orders; the client's ClientFacingOrder). `status` is the
    top-level status; `detailed_status` (ours) the full current one; `interpretation` is
    null until the results come."""

    model_config = ConfigDict(json_schema_extra={"examples": [ORDER_EXAMPLE]})
    id: str
    user_id: str
    team_id: str
    patient_details: PatientDetailsAnswer | None = Field(description=_ERASED)
    patient_address: PatientAddressAnswer | None = Field(description=_ERASED)
    lab_test: OrderedLabTest
    details: OrderDetails
    sample_id: str | None = None
    notes: str | None = None
    created_at: datetime
    updated_at: datetime
    events: list[OrderEvent]
    # The newest of `events` (junction-api-sdk 2.0.0's ClientFacingOrder requires it).
    last_event: OrderEvent
    status: str
    detailed_status: str
    interpretation: Interpretation | ErasedValue | None = Field(default=None, description=_ERASED)
    has_missing_results: bool | None = None
    health_insurance_id: str | None = Field(
        default=None, description="Always null: this deployment bills no insurance."
    )
    requisition_form_url: str | None = Field(
        default=None,
        description="The requisition's PDF (read with the team's key); null once the order "
        "is cancelled or failed.",
    )
    priority: bool | None = Field(
        default=None, description="A priority (STAT) order, as placed (false: routine)."
    )
    activate_by: str | None = None
    passthrough: str | None = Field(
        default=None,
        description="The string the order was placed with (null: none). A past answer "
        "(`as_of`) shows it as `<personal data: erased>` once the user is erased.",
    )
    billing_type: str | None = Field(
        default=None, description="client_bill: the only bill type placing accepts."
    )
    icd_codes: list[str] | None = Field(
        default=None,
        description="The diagnoses the order was placed with, ICD-10-CM codes in their dotted "
        "form (null: none). A past answer (`as_of`) shows them, once the user is erased, as "
        "one member `<personal data: erased>`.",
    )
    has_abn: bool
    expected_result_by_date: str | None = Field(
        default=None,
        description="The UTC day (YYYY-MM-DD) the results are expected by, as the order's "
        "tracking estimates it now; null where it has no estimate (a production order "
        "before its results, a cancelled or failed one, one waiting for an appointment).",
    )
    worst_case_result_by_date: str | None = Field(
        default=None,
        description="The latest UTC day: each step to come taken a sweep of the simulated "
        "lab late.",
    )


class OrderChanged(OrderAnswer):
    """The order after a change (placed, cancelled, moved by /test): the order itself, and
    the client's PostOrderResponse around it (`order`, `message`; its `status` is the
    order's)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{**ORDER_EXAMPLE, "order": ORDER_EXAMPLE, "message": "Order created."}]
        }
    )
    order: OrderAnswer
    message: str


class OrdersPage(BaseModel):
    """`GET /v3/orders`: the team's orders, newest first (the client's GetOrdersResponse)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"orders": [ORDER_EXAMPLE], "total": 1, "page": 1, "size": 50, "pages": 1}]
        }
    )
    orders: list[OrderAnswer]
    total: int = Field(ge=0)
    page: int = Field(ge=1)
    size: int = Field(ge=1)
    pages: int = Field(ge=0)


_METADATA_EXAMPLE: dict[str, Any] = {
    "age": "35",
    "dob": "1990-04-12",
    "clia_#": None,
    "patient": "Alex Example",
    "provider": None,
    "laboratory": "Quest Diagnostics",
    "date_reported": "2026-03-05T12:00:00+00:00",
    "date_collected": "2026-03-03T12:00:00+00:00",
    "specimen_number": "0123456789",
    "date_received": "2026-03-03T12:00:00+00:00",
    "status": "final",
    "interpretation": "normal",
    "patient_id": "5f0c2d1e-8a7b-4c6d-9e0f-1a2b3c4d5e6f",
    "account_id": None,
}


class ResultsMetadata(BaseModel):
    """The report's header (the client's LabResultsMetadata): who, which sample, when."""

    model_config = ConfigDict(
        populate_by_name=True, json_schema_extra={"examples": [_METADATA_EXAMPLE]}
    )
    age: str
    dob: str
    clia: str | None = Field(default=None, alias="clia_#")
    patient: str
    provider: str | None = None
    laboratory: str | None = None
    date_reported: str
    date_collected: str | None = None
    specimen_number: str
    date_received: str | None = None
    status: str | None = None
    interpretation: str | None = None
    patient_id: str | None = None
    account_id: str | None = None


class SourceMarker(BaseModel):
    marker_id: int
    name: str
    slug: str
    provider_id: str | None = None


class BiomarkerResultAnswer(BaseModel):
    """One value per expected result (the client's BiomarkerResult): `value` (ours) is the
    number that `result` writes (null for a presence test: `result` reads "Non-reactive",
    "Detected"...; `type` coded_value); `min_range_value`..`max_range_value` the reference
    range, `critical_low`/`critical_high` (ours) its critical bounds."""

    name: str
    slug: str | None = None
    result: str
    value: float | None
    type: Literal["numeric", "coded_value"]
    unit: str | None = None
    timestamp: datetime | None = None
    notes: str | None = None
    reference_range: str | None = None
    min_range_value: float | None = None
    max_range_value: float | None = None
    is_above_max_range: bool | None = None
    is_below_min_range: bool | None = None
    interpretation: Interpretation
    critical_low: float | None = None
    critical_high: float | None = None
    loinc: str | None = None
    loinc_slug: str | None = None
    provider_id: str | None = None
    expected_result_id: int
    source_markers: list[SourceMarker] | None = None
    performing_laboratory: str | None = None
    source_sample_id: str | None = None


_RESULT_EXAMPLE: dict[str, Any] = {
    "name": "Hemoglobin A1c",
    "slug": "hemoglobin-a1c",
    "result": "5.4",
    "value": 5.4,
    "type": "numeric",
    "unit": "%",
    "timestamp": "2026-03-05T12:00:00Z",
    "notes": None,
    "reference_range": "4-5.6",
    "min_range_value": 4.0,
    "max_range_value": 5.6,
    "is_above_max_range": False,
    "is_below_min_range": False,
    "interpretation": "normal",
    "critical_low": None,
    "critical_high": 14.0,
    "loinc": "4548-4",
    "loinc_slug": "hemoglobin-a1c-total-hemoglobin-in-blood",
    "provider_id": "496",
    "expected_result_id": 1001,
    "source_markers": [
        {"marker_id": 101, "name": "Hemoglobin A1c", "slug": "hemoglobin-a1c", "provider_id": "496"}
    ],
    "performing_laboratory": "Quest Diagnostics",
    "source_sample_id": "0123456789",
}


class MissingResult(BaseModel):
    """An expected result the lab could not report (the client's MissingBiomarkerResult);
    the simulated lab reports every one."""

    name: str
    slug: str
    inferred_failure_type: str
    note: str | None = None
    loinc: str | None = None
    loinc_slug: str | None = None
    provider_id: str | None = None


class OrderResults(BaseModel):
    """`GET /v3/order/{id}/result` (the client's LabResultsRaw): the report's metadata and
    one result per expected result of the order's markers."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "metadata": _METADATA_EXAMPLE,
                    "results": [_RESULT_EXAMPLE],
                    "missing_results": [],
                    "sample_information": {},
                    "order_id": "7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b",
                    "interpretation": "normal",
                }
            ]
        }
    )
    metadata: ResultsMetadata
    results: list[BiomarkerResultAnswer] | ErasedValue = Field(
        description="A past answer (`as_of`) about a user erased since shows the values, "
        "destroyed with its key, as `<personal data: erased>` (and so the patient's name, "
        "date of birth, age and the interpretation)."
    )
    missing_results: list[MissingResult]
    sample_information: dict[str, Any]
    order_id: str
    interpretation: Interpretation | ErasedValue | None
