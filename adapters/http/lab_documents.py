"""Team API routes of lab testing's printed documents (issue 33; docs/labs.md, Documents),
at the official client's paths: an order's requisition, labels, ABN, collection
instructions and result report, and a lab test's collection instructions, each a PDF.

An order's documents read the `orders` read model as its other reads do: another team's
order, or one of a user erased since, is a 404. Printing takes headless Chromium about a
second: the routes are sync, so each runs in a worker thread, not on the event loop.
"""

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from fastapi.responses import Response
from healthledger.adapters.answers.lab_documents import LabDocuments
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.orders import stored_order
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.labs.documents import DEFAULT_LABELS, MAX_LABELS
from healthledger.domain.labs.lab_tests import UnknownLabTests

router = APIRouter(tags=["lab documents"], route_class=LedgerRoute)
# A label's collection date is a real one (year 1 in another zone would not even convert
# to UTC).
MIN_YEAR, MAX_YEAR = 1900, 2200

_PDF: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/pdf": {}}, "description": "The document, a PDF."}
}
_ORDER_NOT_FOUND = "Unknown order, another team's, or an order of a user erased since."
_VOID = "The order is cancelled or failed: it has no collection papers."
# What each of an order's collection papers answers.
_PAPERS: dict[int | str, dict[str, Any]] = {
    **_PDF,
    **error_responses(401, 404, 409, 422, described={404: _ORDER_NOT_FOUND, 409: _VOID}),
}


def documents(service: Service) -> LabDocuments:
    """The documents' renderer over the service's catalog, answers and teams."""

    def team_name(team_id: Any) -> str:
        team = service.team_queries.team(team_id)
        return "" if team is None else str(team["name"])

    return LabDocuments(service.lab_catalog, service.order_answers, team_name, service.clock)


def pdf(body: bytes, name: str) -> Response:
    # Inline, to open in a browser's viewer; never cached: a document names the patient.
    return Response(
        content=body,
        media_type="application/pdf",
        headers={
            "Content-Disposition": f'inline; filename="{name}.pdf"',
            "Cache-Control": "no-store",
        },
    )


@router.get(
    "/v3/order/{order_id:uuid}/requisition/pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=_PAPERS,
)
def requisition_pdf(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """The order's requisition: the lab, the team, the patient, the tests with the lab's
    codes, and the requisition number as a Code 128 barcode."""
    row = stored_order(service, caller, order_id)
    return pdf(documents(service).requisition(row), f"requisition-{order_id}")


@router.get(
    "/v3/order/{order_id:uuid}/labels/pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=_PAPERS,
)
def labels_pdf(
    service: CurrentService,
    order_id: UUID,
    caller: TeamApiCaller,
    collection_date: Annotated[datetime, Query(description="When the sample is collected.")],
    number_of_labels: Annotated[int, Query(ge=1, le=MAX_LABELS)] = DEFAULT_LABELS,
) -> Any:
    """Specimen labels: the patient's name and date of birth, the collection date and the
    requisition number's barcode, `number_of_labels` to a sheet."""
    if not MIN_YEAR <= collection_date.year <= MAX_YEAR:
        raise InvalidRequest(
            f"collection_date must be between {MIN_YEAR} and {MAX_YEAR}.",
            "collection_date",
            "query",
        )
    row = stored_order(service, caller, order_id)
    body = documents(service).labels(row, collection_date, number_of_labels)
    return pdf(body, f"labels-{order_id}")


@router.get(
    "/v3/order/{order_id:uuid}/abn_pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=_PAPERS,
)
def abn_pdf(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """The Advance Beneficiary Notice: the tests with their estimated costs (the list
    prices: this deployment bills the team, not Medicare) for the patient to sign."""
    row = stored_order(service, caller, order_id)
    return pdf(documents(service).abn(row), f"abn-{order_id}")


@router.get(
    "/v3/order/{order_id:uuid}/collection_instruction_pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses=_PAPERS,
)
def order_collection_instructions_pdf(
    service: CurrentService, order_id: UUID, caller: TeamApiCaller
) -> Any:
    """How the patient's sample is collected for this order."""
    row = stored_order(service, caller, order_id)
    return pdf(documents(service).order_instructions(row), f"collection-{order_id}")


@router.get(
    "/v3/order/{order_id:uuid}/result/pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses={
        **_PDF,
        **error_responses(
            401, 404, 409, 422, described={404: _ORDER_NOT_FOUND, 409: "No results yet."}
        ),
    },
)
def result_pdf(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """The result report: each result with its code, unit, reference range and flag,
    and the order's interpretation."""
    row = stored_order(service, caller, order_id)
    return pdf(documents(service).result_report(row), f"results-{order_id}")


@router.get(
    "/v3/lab_test/{lab_test_id:uuid}/collection_instruction_pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses={**_PDF, **error_responses(401, 404, 422, described={404: "Unknown lab test."})},
)
def lab_test_collection_instructions_pdf(
    service: CurrentService, lab_test_id: UUID, caller: TeamApiCaller
) -> Any:
    """How a sample is collected for a lab test (the team's own or a shared demo one)."""
    row = service.lab_tests.row(caller.team_id, lab_test_id)
    if row is None:
        raise UnknownLabTests([lab_test_id])
    return pdf(documents(service).lab_test_instructions(row), f"collection-{lab_test_id}")
