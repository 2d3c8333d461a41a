"""Team API routes of the rest of the official clients' lab methods (issue 33): an order's
result metadata, its on-site draw, the webhooks of order events sent again, lab tests a
cursor page at a time, a marker by its lab's code, order sets priced, ICD-10-CM codes
validated and searched, and the insurance and payor methods, which say this deployment
does not bill insurance.

Another team's order or lab test is a 404, as everywhere."""

import hashlib
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID, uuid5

from fastapi import APIRouter, Query
from healthledger.adapters.answers.orders import marker_price
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.lab_tests import (
    MAX_IDS,
    LabTestFilters,
    LabTestResponse,
    MarkerResponse,
    OrderSetRequest,
    Rendering,
    _LabSlug,
    _ProviderId,
    json_response,
    lab_test_answers,
    order_set_markers,
)
from healthledger.adapters.http.order_schemas import (
    CollectionMethod,
    OrderChanged,
    OrderPatientAddress,
    ResultsMetadata,
)
from healthledger.adapters.http.orders import changed_answer, stored_order
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.persistence.queries.order_deliveries import OrderDeliveries
from healthledger.adapters.reference import icd10
from healthledger.adapters.reference.labs import US_STATES
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.instants import as_utc
from healthledger.domain.labs.billing import InsuranceNotBilled, require_client_bill
from healthledger.domain.labs.catalog import Marker
from healthledger.domain.labs.lab_tests import LabTestInactive, UnknownMarkers
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import OrderedTest, OrderNotFound
from healthledger.domain.labs.patients import PatientDetails
from pydantic import BaseModel, ConfigDict, Field, field_validator

router = APIRouter(tags=["lab testing"], route_class=LedgerRoute)

_ORDER_NOT_FOUND = {404: "Unknown order, another team's, or an order of a user erased since."}
_NOT_BILLED = {400: "This deployment does not bill insurance (the detail says so)."}
# Lab tests per cursor page.
DEFAULT_LAB_TEST_LIMIT = 50
MAX_LAB_TEST_LIMIT = 100
_LAB_TEST_PAGES = "lab-tests-v1"


# -- result metadata, on-site draws, events sent again ------------------------------------


@router.get(
    "/v3/order/{order_id:uuid}/result/metadata",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=ResultsMetadata,
    responses=error_responses(
        401, 404, 409, 422, described={**_ORDER_NOT_FOUND, 409: "No results yet."}
    ),
)
def result_metadata(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """LabResultsMetadata: the report's patient, laboratory, specimen and dates (the
    metadata of `GET /v3/order/{id}/result`)."""
    row = stored_order(service, caller, order_id)
    return service.order_answers.results(row)["metadata"]


@router.patch(
    "/v3/order/{order_id:uuid}/draw_completed",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        422,
        described={
            **_ORDER_NOT_FOUND,
            400: "Not an on-site collection order, or not waiting for its draw.",
        },
    ),
)
def draw_completed(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """An on-site collection order's draw, done by the team: the sample goes to the lab
    (an event on the order, announced like its other steps)."""
    order = service.lab_orders.draw_completed(caller.ctx, caller.team_id, order_id)
    return changed_answer(service, order, "Draw completed.")


# -- order set pricing (junction's estimate_order_set_pricing) ------------------------

# Order sets priced in one request.
MAX_ORDER_SETS = 20
_CENTS = Decimal(100)


class OrderSetPricingRequest(BaseModel):
    """junction-api-sdk's `estimate_order_set_pricing` body: the order sets, how they
    would be collected (`modality`), where (`us_state`) and who pays (`billing`)."""

    model_config = ConfigDict(extra="forbid")
    order_sets: list[OrderSetRequest] = Field(min_length=1, max_length=MAX_ORDER_SETS)
    modality: CollectionMethod
    us_state: str = Field(
        pattern=r"^[A-Z]{2}$", description="A US state, DC or PR, by its postal code."
    )
    billing: (
        Literal[
            "client_bill",
            "commercial_insurance",
            "patient_bill_passthrough",
            "patient_bill",
            "upfront_payment",
        ]
        | None
    ) = None

    @field_validator("us_state")
    @classmethod
    def _a_state(cls, value: str) -> str:
        if value not in US_STATES:
            raise ValueError("must be the postal code of a US state, DC or PR")
        return value


class PricingConditions(BaseModel):
    """An amount in cents (`base_amount_minor`); no modifier applies to a client bill."""

    base_amount_minor: int = Field(ge=0)
    modifiers: list[dict[str, Any]] = Field(default_factory=list)


class LabChargeComponent(BaseModel):
    """What the lab charges: its markers' catalog prices, by marker id."""

    id: Literal["lab_charge"] = "lab_charge"
    pricing: PricingConditions
    marker_breakdown: dict[str, PricingConditions]


class OrderSetPricing(BaseModel):
    aggregate_pricing: PricingConditions
    components: list[LabChargeComponent]


class OrderSetPricingResponse(BaseModel):
    """EstimateOrderSetPricingResponse: one estimate per order set, in the order sent."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "currency": "USD",
                    "data": [
                        {
                            "aggregate_pricing": {"base_amount_minor": 5800, "modifiers": []},
                            "components": [
                                {
                                    "id": "lab_charge",
                                    "pricing": {"base_amount_minor": 5800, "modifiers": []},
                                    "marker_breakdown": {
                                        "1046": {"base_amount_minor": 3400, "modifiers": []},
                                        "1077": {"base_amount_minor": 2400, "modifiers": []},
                                    },
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    )
    currency: Literal["USD"] = "USD"
    data: list[OrderSetPricing]


def _cents(marker: Marker) -> int:
    # The catalog's price in dollars with two decimals, as orders sum it (`_price`).
    return int(marker_price(marker) * _CENTS)


@router.post(
    "/v3/lab_test/estimate_order_set_pricing",
    response_model=OrderSetPricingResponse,
    responses=error_responses(
        400,
        401,
        404,
        422,
        described={
            **_NOT_BILLED,
            404: "Unknown lab tests (another team's too), marker ids or codes (named).",
            422: "Invalid body; an order set with no marker or of two labs; a modality its "
            "lab does not offer; not a US state.",
        },
    ),
)
def estimate_order_set_pricing(
    service: CurrentService, body: OrderSetPricingRequest, caller: TeamApiCaller
) -> Any:
    """What each order set would cost the team: its markers' catalog prices, the same
    prices an order's test is priced at (in cents). Billed to the team only; the state is
    checked and does not change a price here (the catalog has one price per marker)."""
    require_client_bill(body.billing, with_insurance=False)
    data = []
    for index, order_set in enumerate(body.order_sets):
        markers = order_set_markers(service, caller.team_id, order_set)
        if not markers:
            raise InvalidRequest(
                f"order_sets[{index}] names no lab test and no marker.", "order_sets"
            )
        lab = service.lab_catalog.lab(markers[0].lab_id)
        if lab is None or body.modality not in lab.collection_methods:
            offered = "" if lab is None else ", ".join(lab.collection_methods)
            raise InvalidRequest(
                f"order_sets[{index}]'s lab does not offer {body.modality} (it offers {offered}).",
                "modality",
            )
        breakdown = {str(m.id): PricingConditions(base_amount_minor=_cents(m)) for m in markers}
        total = PricingConditions(base_amount_minor=sum(_cents(m) for m in markers))
        data.append(
            OrderSetPricing(
                aggregate_pricing=total,
                components=[LabChargeComponent(pricing=total, marker_breakdown=breakdown)],
            )
        )
    return OrderSetPricingResponse(data=data)


# The id of the set an imported order is of, when it is not one lab test: fixed by its
# markers.
_IMPORTED_SET = UUID("7c4f0d1e-2b6a-5e39-8d17-4a0c9e6b3f52")


class OrderImport(BaseModel):
    """The official client's `import_order` body: an order placed outside, with the
    lab's sample id. `physician` is accepted and not kept (the orders here have none)."""

    model_config = ConfigDict(extra="forbid")
    user_id: UUID
    billing_type: Literal[
        "client_bill", "commercial_insurance", "patient_bill_passthrough", "patient_bill"
    ]
    order_set: OrderSetRequest
    collection_method: CollectionMethod
    patient_details: PatientDetails
    patient_address: OrderPatientAddress
    sample_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9\-]*$")
    physician: dict[str, Any] | None = None
    lab_account_id: UUID | None = None


@router.post(
    "/v3/order/import",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            400: "Billed otherwise than to the team: no insurance billed here.",
            404: "Unknown user, lab tests, marker ids or codes (named).",
            409: "A lab test of the set is inactive (its team took it out of use).",
            422: "Invalid body, markers of two labs, a method the lab does not offer.",
        },
    ),
)
def import_order(service: CurrentService, body: OrderImport, caller: TeamApiCaller) -> Any:
    """An order placed outside: recorded at `requisition_created` with its sample id (the
    order's events: Created, then StatusChanged), then moving as any order."""
    require_client_bill(body.billing_type, with_insurance=False)
    order_set = body.order_set
    if body.lab_account_id is not None and order_set.lab_account_id is None:
        order_set = order_set.model_copy(update={"lab_account_id": body.lab_account_id})
    markers = order_set_markers(service, caller.team_id, order_set)
    if not markers:
        raise InvalidRequest("The order set names no lab test and no marker.", "order_set")
    test_ids = list(dict.fromkeys(order_set.lab_test_ids or ()))
    rows = service.lab_tests.rows(caller.team_id, test_ids)
    inactive = [i for i in test_ids if not rows[i].view.active]
    if inactive:  # an imported order is a new order of its tests, as a placed one
        raise LabTestInactive(inactive[0])
    marker_ids = tuple(m.id for m in markers)
    if len(test_ids) == 1 and not order_set.add_on:
        ordered = OrderedTest(test_ids[0], rows[test_ids[0]].view.name, marker_ids)
    else:
        names = [rows[i].view.name for i in test_ids] or ["Imported order set"]
        set_id = uuid5(_IMPORTED_SET, ",".join(map(str, sorted(marker_ids))))
        ordered = OrderedTest(set_id, " + ".join(names), marker_ids)
    request = OrderRequest(
        user_id=body.user_id,
        lab_test_id=ordered.lab_test_id,
        collection_method=body.collection_method,
        patient_details=body.patient_details,
        patient_address=body.patient_address,
    )
    order = service.lab_orders.import_order(
        caller.ctx, caller.team_id, request, ordered, markers[0].lab_id, body.sample_id
    )
    return changed_answer(service, order, "Order imported.")


class ResendEvents(BaseModel):
    """The official client's `order.resend_events` body: the orders (all the team's if
    none), and when their events were recorded (`[start_at, end_at)`)."""

    model_config = ConfigDict(extra="forbid")
    order_ids: list[UUID] | None = Field(default=None, min_length=1, max_length=100)
    start_at: datetime | None = None
    end_at: datetime | None = None


class EventsSentAgain(BaseModel):
    """ResendWebhookResponse: the orders whose events were sent again."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"order_ids": ["7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b"]}]}
    )
    order_ids: list[str]


@router.post(
    "/v3/order/resend_events",
    response_model=EventsSentAgain,
    responses=error_responses(401, 404, 422, described=_ORDER_NOT_FOUND),
)
def resend_events(service: CurrentService, body: ResendEvents, caller: TeamApiCaller) -> Any:
    """Send the webhooks of the orders' events again, to every endpoint that was sent
    them, with their original message ids (each a `WebhookDelivery.Replayed` event);
    `order_ids`: the orders that had one. Unknown orders, another team's: a 404."""
    if body.order_ids is None and body.start_at is None:
        raise InvalidRequest(
            "Name the orders (order_ids) or when their events were recorded from "
            "(start_at): all of a team's events at once are not sent again.",
            "order_ids",
        )
    # An instant without an offset is UTC (gaps.md), so that both bounds compare.
    start_at, end_at = (
        None if moment is None else as_utc(moment) for moment in (body.start_at, body.end_at)
    )
    if start_at and end_at and end_at <= start_at:
        raise InvalidRequest("end_at must be after start_at.", "end_at")
    for order_id in body.order_ids or ():
        if service.order_queries.order(caller.team_id, order_id) is None:
            raise OrderNotFound()
    found = OrderDeliveries(service.db).of_orders(caller.team_id, body.order_ids, start_at, end_at)
    service.redeliveries.replay_deliveries(
        caller.ctx, [delivery for deliveries in found.values() for delivery in deliveries]
    )
    return {"order_ids": [str(order_id) for order_id in found]}


# -- lab tests and markers --------------------------------------------------------------


class LabTestPage(BaseModel):
    """LabTestResourcesResponse: a page of lab tests and the cursor of the next."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data": LabTestResponse.model_config["json_schema_extra"]["examples"],  # type: ignore[index]
                    "next_cursor": "eyJzIjoibGFiLXRlc3RzLXYxIn0.c2lnbmF0dXJl",
                }
            ]
        }
    )
    data: list[LabTestResponse]
    next_cursor: str | None


@router.get(
    "/v3/lab_test",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=LabTestPage,
    responses=error_responses(
        400, 401, 422, described={400: "A cursor this listing did not issue."}
    ),
)
def lab_tests_page(
    rendering: Rendering,
    service: CurrentService,
    caller: TeamApiCaller,
    cursors: Cursors,
    lab_test_limit: Annotated[int, Query(ge=1, le=MAX_LAB_TEST_LIMIT)] = DEFAULT_LAB_TEST_LIMIT,
    next_cursor: Annotated[str | None, Query(min_length=1, max_length=2000)] = None,
    generation_method: Literal["auto", "manual", "all"] = "all",
    lab_slug: Annotated[_LabSlug | None, Query()] = None,
    collection_method: Literal[
        "testkit", "walk_in_test", "at_home_phlebotomy", "on_site_collection"
    ]
    | None = None,
    status: Literal["active", "pending_approval", "inactive"] | None = None,
    marker_ids: Annotated[list[int] | None, Query(max_length=MAX_IDS)] = None,
    provider_ids: Annotated[list[_ProviderId] | None, Query(max_length=MAX_IDS)] = None,
    name: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
    order_key: Literal["price", "created_at", "updated_at"] | None = None,
    order_direction: Literal["asc", "desc"] = "asc",
) -> Any:
    """The lab tests of `GET /v3/lab_tests`, filtered and ordered alike, `lab_test_limit`
    at a time: `next_cursor` (signed, bound to the filters) fetches the next page."""
    filters = LabTestFilters(
        generation_method,
        lab_slug,
        collection_method,
        status,
        marker_ids,
        provider_ids,
        name,
        order_key,
        order_direction,
    )
    # A cursor is good for the team's listing with the same filters only.
    digest = hashlib.sha256(f"{caller.team_id}:{filters!r}".encode()).hexdigest()[:32]
    scope = f"{_LAB_TEST_PAGES}:{digest}"
    start = 0 if next_cursor is None else int(cursors.decode(next_cursor, scope)["offset"])
    answers = lab_test_answers(rendering, service, caller.team_id, filters, None)
    end = start + lab_test_limit
    following = cursors.encode({"offset": end}, scope) if end < len(answers) else None
    return {"data": answers[start:end], "next_cursor": following}


@router.get(
    "/v3/lab_tests/{lab_id:int}/markers/{provider_id}",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=MarkerResponse,
    responses=error_responses(
        401, 404, 422, described={404: "No such lab, or no marker with that code at it."}
    ),
)
def marker_by_provider_id(
    rendering: Rendering,
    service: CurrentService,
    caller: TeamApiCaller,
    lab_id: int,
    provider_id: _ProviderId,
    lab_account_id: UUID | None = None,
) -> Any:
    """The lab's marker with this code of the lab's (`provider_id`)."""
    if lab_account_id is not None:
        account = service.lab_catalog.account(lab_account_id)
        if account is None or lab_id not in account.lab_ids:
            raise InvalidRequest(
                "lab_account_id names no lab account that orders from this lab.",
                "lab_account_id",
                "query",
            )
    if service.lab_catalog.lab(lab_id) is None:
        raise UnknownMarkers("lab", [lab_id])
    found = service.lab_catalog.markers_by_provider_id(lab_id, [provider_id])
    if not found:
        raise UnknownMarkers(f"codes at lab {lab_id}", [provider_id])
    return json_response(rendering.marker_json[found[0].id])


# -- ICD-10-CM ------------------------------------------------------------------------


class IcdCodes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    codes: list[Annotated[str, Field(min_length=1, max_length=icd10.MAX_CODE_LENGTH)]] = Field(
        min_length=1, max_length=icd10.MAX_CODES
    )


class IcdExcludesViolation(BaseModel):
    code: str
    conflicts_with: str
    type: str


class IcdExcludesWarning(BaseModel):
    code: str
    overlaps_with: str
    type: str


class IcdValidation(BaseModel):
    """ValidateIcdCodesResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "valid": False,
                    "errors": [
                        "E11 is a category, not a billable code: code one of its subcodes "
                        "(E11.0, E11.1, E11.2...)."
                    ],
                    "violations": [
                        {"code": "E10.9", "conflicts_with": "E11.9", "type": "excludes1"},
                        {"code": "E11.9", "conflicts_with": "E10.9", "type": "excludes1"},
                    ],
                    "warnings": [],
                }
            ]
        }
    )
    valid: bool
    errors: list[str]
    violations: list[IcdExcludesViolation]
    warnings: list[IcdExcludesWarning]


class DiagnosisInformation(BaseModel):
    """ClientFacingDiagnosisInformation: a billable ICD-10-CM code and its description."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "diagnosis_code": "E11.9",
                    "description": "Type 2 diabetes mellitus without complications",
                    "is_secondary": None,
                }
            ]
        }
    )
    diagnosis_code: str
    description: str
    is_secondary: bool | None = None


@router.post(
    "/v3/insurance/validate_icd_codes",
    response_model=IcdValidation,
    responses=error_responses(401, 422),
)
def validate_icd_codes(body: IcdCodes, caller: TeamApiCaller) -> Any:
    """ValidateIcdCodesResponse: whether the codes are billable ICD-10-CM codes that can
    be coded together. `errors`: not codes, or categories; `violations`: Excludes1 pairs
    (never together); `warnings`: Excludes2 pairs (together only when both apply)."""
    found = icd10.validate(body.codes)
    return {
        "valid": found.valid,
        "errors": found.errors,
        "violations": [
            {"code": v.code, "conflicts_with": v.other, "type": v.type} for v in found.violations
        ],
        "warnings": [
            {"code": w.code, "overlaps_with": w.other, "type": w.type} for w in found.warnings
        ],
    }


@router.get(
    "/v3/insurance/search/diagnosis",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    response_model=list[DiagnosisInformation],
    responses=error_responses(401, 422),
)
def search_diagnosis(
    caller: TeamApiCaller,
    diagnosis_query: Annotated[str, Query(min_length=1, max_length=100)],
) -> Any:
    """Billable ICD-10-CM codes by code prefix or by the words of their description
    (list of ClientFacingDiagnosisInformation, at most 50, codes first)."""
    return [
        {"diagnosis_code": code, "description": description, "is_secondary": False}
        for code, description in icd10.search(diagnosis_query)
    ]


# -- insurance and payors: not billed here ----------------------------------------------


@router.get(
    "/v3/insurance/search/payor",
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=error_responses(400, 401, 422, described=_NOT_BILLED),
)
@router.post(
    "/v3/insurance/search/payor", responses=error_responses(400, 401, 422, described=_NOT_BILLED)
)
@router.post("/v3/payor", responses=error_responses(400, 401, 422, described=_NOT_BILLED))
def payors(caller: TeamApiCaller) -> Any:
    """Payor search and creation: this deployment bills the team, not insurance."""
    raise InsuranceNotBilled()
