"""Team API routes of lab test orders (issue 14; gaps.md Orders): place, read (now or as
of an instant), list, cancel, advance a sandbox order (`/test`), and read the results.

Writes go through `LabOrders`; reads through the `orders` read model (`OrderQueries`), or
the log for `as_of`; every answer is rendered by `OrderAnswers` (adapters/answers/orders.py).
Another team's order is a 404, as is an order of a user erased since.
"""

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Header, Query
from healthledger.adapters.answers.orders import OrderRow
from healthledger.adapters.compliance.time_travel import (
    PlaceholderVault,
    aggregate_as_of,
    reads_as_of,
)
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller, TeamCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.order_schemas import (
    CollectionMethod,
    Interpretation,
    OrderActivation,
    OrderAnswer,
    OrderChanged,
    OrderCreate,
    OrderResults,
    OrdersPage,
    SimulationFlags,
)
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.persistence.queries.orders import OrderFilters
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.labs.billing import require_client_bill
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import TOP_LEVEL_STATUSES, Order, OrderNotFound
from healthledger.domain.labs.sandbox import FAILURE_STATUS, STEPS

# Every status a listing filters on: the top-level ones and the low-level ones (the last
# part of `received.testkit.requisition_created`), ours and the official client's.
LOW_LEVEL_STATUSES = frozenset(
    {low for steps in STEPS.values() for _top, low in steps}
    | set(FAILURE_STATUS.values())
    | {
        "requisition_bypassed",
        "transit_lab",
        "with_customer",
        "out_for_delivery",
        "failure_to_deliver_to_customer",
        "problem_in_transit_lab",
        "problem_in_transit_customer",
        "appointment_scheduled",
        "appointment_cancelled",
        "cancelled",
        "lost",
        "do_not_process",
        "awaiting_registration",
        "registered",
        "redraw_available",
    }
)
FILTER_STATUSES = frozenset(TOP_LEVEL_STATUSES) | LOW_LEVEL_STATUSES

_ORDER_NOT_FOUND = {404: "Unknown order, another team's, or an order of a user erased since."}
_IDEMPOTENCY_KEY = Header(
    alias="X-Idempotency-Key",
    min_length=1,
    max_length=255,
    pattern=r"^[\x20-\x7e]+$",
    description="The same key and body answer the order placed first (nothing new is "
    "recorded); the same key with another body is a 409. Printable ASCII, at most 255.",
)
_DATE_FORMS = "a date (YYYY-MM-DD) or an ISO 8601 date-time (without an offset: UTC)"
DateBound = Annotated[str | None, Query(min_length=1, max_length=64, description=f"{_DATE_FORMS}.")]


def _bound(value: str | None, field: str, *, end: bool) -> datetime | None:
    """A listing's date bound: a date starts at 00:00 or, as an end, ends at the last
    instant of its day (UTC)."""
    if value is None:
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime.combine(day, time.max if end else time.min, UTC)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{field} must be {_DATE_FORMS}.", field, "query") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _statuses(values: Sequence[str] | None) -> list[str]:
    found = list(values or ())
    unknown = sorted(set(found) - FILTER_STATUSES)
    if unknown:
        raise InvalidRequest(
            f"Unknown status {unknown[0]!r}: a top-level status ({', '.join(TOP_LEVEL_STATUSES)}) "
            "or a low-level one (requisition_created, completed...).",
            "status",
            "query",
        )
    return found


def changed_answer(service: Service, order: Order, message: str) -> dict[str, Any]:
    """The order after a change, as the client's PostOrderResponse reads it (`OrderChanged`)."""
    row = service.order_queries.order(order.team_id, order.id)
    answer = service.order_answers.order(service.order_answers.row_of(row))
    return {**answer, "order": answer, "message": message}


def stored_order(service: Service, caller: TeamCaller, order_id: UUID) -> OrderRow:
    row = service.order_queries.order(caller.team_id, order_id)
    if row is None:
        raise OrderNotFound()
    return service.order_answers.row_of(row)


def order_as_of(service: Service, caller: TeamCaller, order_id: UUID, as_of: datetime) -> Order:
    """The team's order as it was at `as_of` (not placed yet, another team's: a 404; a
    future instant: a 422)."""
    reads_as_of(service, as_of)  # a future instant is refused
    order = aggregate_as_of(service, order_id, as_of)
    if not isinstance(order, Order) or order.team_id != caller.team_id:
        raise OrderNotFound()
    return order


def _order_as_of(
    service: Service, caller: TeamCaller, order_id: UUID, as_of: datetime
) -> tuple[OrderRow, PlaceholderVault]:
    """The team's order as it was at `as_of` (`order_as_of`), and the vault that opens its
    values as of then (erased since: the placeholder)."""
    order = order_as_of(service, caller, order_id, as_of)
    vault = PlaceholderVault(service.key_store)
    return OrderRow.of(order, vault), vault


router = APIRouter(tags=["lab orders"], route_class=LedgerRoute)


@router.post(
    "/v3/order",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            404: "Unknown user, another team's, scheduled for deletion; unknown lab test.",
            409: "The idempotency key was used for another body; or the lab test is "
            "inactive (its team took it out of use).",
            400: "Billed otherwise than to the team (client_bill): no insurance billed here.",
            422: "Invalid body (an ICD-10-CM code not billable, or two in an Excludes1 "
            "conflict: the detail names the codes); or the user has no demographics to "
            "default the patient's details and address from (the detail names what is "
            "missing).",
        },
    ),
)
def place_order(
    service: CurrentService,
    body: OrderCreate,
    caller: TeamApiCaller,
    idempotency_key: Annotated[str | None, _IDEMPOTENCY_KEY] = None,
) -> Any:
    """Order a lab test for a live user of the team (gaps.md Orders)."""
    require_client_bill(body.billing_type, body.health_insurance is not None)
    request = OrderRequest(
        user_id=body.user_id,
        lab_test_id=body.lab_test_id,
        collection_method=body.collection_method,
        patient_details=body.patient_details,
        patient_address=body.patient_address,
        activate_by=body.activate_by,
        priority=bool(body.priority),
        icd_codes=tuple(body.icd_codes or ()),
        passthrough=body.passthrough,
    )
    order = service.lab_orders.place(caller.ctx, caller.team_id, request, idempotency_key)
    return changed_answer(service, order, "Order created.")


@router.get(
    "/v3/order/{order_id:uuid}",
    response_model=OrderAnswer,
    responses=error_responses(401, 404, 422, described=_ORDER_NOT_FOUND),
)
def get_order(
    service: CurrentService, order_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The order (with `as_of`: as it was at that instant, from the log)."""
    if as_of is None:
        return service.order_answers.order(stored_order(service, caller, order_id))
    order, vault = _order_as_of(service, caller, order_id, as_of)
    return service.order_answers.with_vault(vault).order(order)


@router.get(
    "/v3/orders",
    response_model=OrdersPage,
    responses=error_responses(401, 422),
)
# The spec's name for the listing (service-api.md: `GET /orders` with `interpretation`);
# the official clients call /v3/orders. One operation, served at both.
@router.get(
    "/orders",
    response_model=OrdersPage,
    responses=error_responses(401, 422),
    summary="List Orders (the spec's path; the same as /v3/orders)",
)
def list_orders(
    service: CurrentService,
    caller: TeamApiCaller,
    user_id: UUID | None = None,
    status: Annotated[
        list[str] | None,
        Query(max_length=50, description="Top-level or low-level statuses: any of them."),
    ] = None,
    interpretation: Interpretation | None = None,
    start_date: DateBound = None,
    end_date: DateBound = None,
    updated_start_date: DateBound = None,
    updated_end_date: DateBound = None,
    order_type: Annotated[list[CollectionMethod] | None, Query(max_length=4)] = None,
    order_ids: Annotated[list[UUID] | None, Query(max_length=100)] = None,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    size: Annotated[int, Query(ge=1, le=100)] = 50,
    *,
    as_of: TeamAsOf,
) -> Any:
    """The team's orders, newest first, filtered (gaps.md Orders); with `as_of`, the
    orders as they were at that instant, filtered as then (from the log)."""
    filters = OrderFilters(
        user_id=user_id,
        statuses=_statuses(status),
        interpretation=interpretation,
        created_from=_bound(start_date, "start_date", end=False),
        created_until=_bound(end_date, "end_date", end=True),
        updated_from=_bound(updated_start_date, "updated_start_date", end=False),
        updated_until=_bound(updated_end_date, "updated_end_date", end=True),
        methods=list(order_type or ()),
        order_ids=list(order_ids or ()),
    )
    if as_of is None:
        found = service.order_queries.page(caller.team_id, filters, page, size)
        rows, total = [service.order_answers.row_of(row) for row in found.rows], found.total
        answers = service.order_answers
    else:
        reads = reads_as_of(service, as_of)
        rows, total = reads.order_page(caller.team_id, filters, page, size)
        answers = service.order_answers.with_vault(reads.vault)
    return {
        "orders": [answers.order(row) for row in rows],
        "total": total,
        "page": page,
        "size": size,
        "pages": math.ceil(total / size),
    }


@router.patch(
    "/v3/order/{order_id:uuid}",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            **_ORDER_NOT_FOUND,
            400: "The order was placed for immediate processing (without activate_by), is "
            "dispatched already (no longer ordered), or the date is in the past or more "
            "than a year ahead.",
            409: "The order changed meanwhile: read it and try again.",
        },
    ),
)
def update_order(
    service: CurrentService, order_id: UUID, body: OrderActivation, caller: TeamApiCaller
) -> Any:
    """Move the day an order placed with `activate_by` is dispatched to the lab, or clear
    it (null) to dispatch the order now (the official client's `update_order`)."""
    order = service.lab_orders.reschedule(caller.ctx, caller.team_id, order_id, body.activate_by)
    message = (
        "Order dispatched now."
        if body.activate_by is None
        else f"Order scheduled for {body.activate_by.isoformat()}."
    )
    return changed_answer(service, order, message)


@router.post(
    "/v3/order/{order_id:uuid}/cancel",
    response_model=OrderChanged,
    responses=error_responses(
        401,
        404,
        409,
        422,
        described={**_ORDER_NOT_FOUND, 409: "The order is completed, failed or cancelled."},
    ),
)
def cancel_order(service: CurrentService, order_id: UUID, caller: TeamApiCaller) -> Any:
    """Cancel an open order."""
    order = service.lab_orders.cancel(caller.ctx, caller.team_id, order_id)
    return changed_answer(service, order, "Order cancelled.")


@router.post(
    "/v3/order/{order_id:uuid}/test",
    response_model=OrderChanged,
    responses=error_responses(
        400,
        401,
        404,
        409,
        422,
        described={
            **_ORDER_NOT_FOUND,
            400: "Not a sandbox order, or a final one: it takes no step.",
        },
    ),
)
def advance_order(
    service: CurrentService,
    order_id: UUID,
    caller: TeamApiCaller,
    body: Annotated[SimulationFlags | None, Body()] = None,
) -> Any:
    """Sandbox only: take the order one step on now, as the simulated lab would; when
    the step reports the results, `interpretation` forces their outcome."""
    forced = None if body is None else body.interpretation
    order = service.lab_orders.advance(caller.ctx, caller.team_id, order_id, forced)
    return changed_answer(service, order, "Order moved one step.")


@router.get(
    "/v3/order/{order_id:uuid}/result",
    response_model=OrderResults,
    responses=error_responses(
        401,
        404,
        409,
        422,
        described={**_ORDER_NOT_FOUND, 409: "The order has no results yet."},
    ),
)
def order_results(
    service: CurrentService, order_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The results: one value per expected result of the order's markers, each with
    its unit, reference range and interpretation (with `as_of`: as they were at that
    instant, from the log; a 409 if the order had none yet)."""
    if as_of is None:
        return service.order_answers.results(stored_order(service, caller, order_id))
    order, vault = _order_as_of(service, caller, order_id, as_of)
    return service.order_answers.with_vault(vault).results(order)
