"""Team API routes of order transactions (junction-api-sdk's `order_transaction.*`;
docs/labs.md#order-transactions).

In the production service a transaction is an order and the orders that follow from it
(re-draws, re-creations) sharing one id. This deployment places no re-draw or re-creation:
each order is its own transaction, under the order's own id, holding that one order
(`origin` initial, no parent). So a transaction's read, its results and its result report
are the order's: answered by the same code as `/v3/order/{id}`, `/result` and
`/result/pdf`. Another team's order, or an unknown id, is a 404."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter
from fastapi.responses import Response
from healthledger.adapters.answers.orders import OrderRow
from healthledger.adapters.compliance.time_travel import PlaceholderVault
from healthledger.adapters.http import lab_documents, orders
from healthledger.adapters.http.as_of import TEAM_READ_REFUSES_AS_OF, TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.order_schemas import OrderResults
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.domain.labs.orders import CANCELLED, COMPLETED, FAILED
from pydantic import BaseModel, ConfigDict

router = APIRouter(tags=["lab orders"], route_class=LedgerRoute)

_NOT_FOUND = {
    404: "Unknown transaction (an order's id), another team's, or of a user erased since."
}


class OrderSummary(BaseModel):
    """junction's OrderSummary: an order of the transaction and its latest status."""

    id: str
    origin: Literal["initial"]
    parent_id: str | None
    last_status: str
    last_status_created_at: datetime
    updated_at: datetime
    created_at: datetime


class OrderTransaction(BaseModel):
    """junction's GetOrderTransactionResponse."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0b7c8a3e-2f41-4d6a-9c1e-5a7b3d2f1e90",
                    "team_id": "5d3c1b2a-0f9e-4d8c-8b7a-6e5d4c3b2a10",
                    "status": "active",
                    "orders": [
                        {
                            "id": "0b7c8a3e-2f41-4d6a-9c1e-5a7b3d2f1e90",
                            "origin": "initial",
                            "parent_id": None,
                            "last_status": "requisition_created",
                            "last_status_created_at": "2026-03-10T12:00:05+00:00",
                            "updated_at": "2026-03-10T12:00:05+00:00",
                            "created_at": "2026-03-10T12:00:00+00:00",
                        }
                    ],
                }
            ]
        }
    )
    id: str
    team_id: str
    status: Literal["active", "completed", "cancelled"]
    orders: list[OrderSummary]


def transaction_status(top_level_status: str) -> Literal["active", "completed", "cancelled"]:
    """completed with results; cancelled when the order ended without them (cancelled,
    or failed at the lab: the order's own status says which); else active."""
    if top_level_status == COMPLETED:
        return "completed"
    if top_level_status in (CANCELLED, FAILED):
        return "cancelled"
    return "active"


def _instant(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def transaction_of(row: OrderRow) -> OrderTransaction:
    last = row.events[-1]
    return OrderTransaction(
        id=str(row.order_id),
        team_id=str(row.team_id),
        status=transaction_status(row.status),
        orders=[
            OrderSummary(
                id=str(row.order_id),
                origin="initial",
                parent_id=None,
                last_status=row.detailed_status.rsplit(".", 1)[-1],
                last_status_created_at=_instant(last["created_at"]),
                updated_at=row.updated_at,
                created_at=row.created_at,
            )
        ],
    )


@router.get(
    "/v3/order_transaction/{transaction_id:uuid}",
    response_model=OrderTransaction,
    responses=error_responses(401, 404, 422, described=_NOT_FOUND),
)
def get_transaction(
    service: CurrentService, transaction_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The transaction: its one order and the order's latest status (with `as_of`: as
    they were at that instant, from the log)."""
    if as_of is None:
        return transaction_of(orders.stored_order(service, caller, transaction_id))
    order = orders.order_as_of(service, caller, transaction_id, as_of)
    return transaction_of(OrderRow.of(order, PlaceholderVault(service.key_store)))


@router.get(
    "/v3/order_transaction/{transaction_id:uuid}/result",
    response_model=OrderResults,
    responses=error_responses(
        401, 404, 409, 422, described={**_NOT_FOUND, 409: "The order has no results yet."}
    ),
)
def get_transaction_result(
    service: CurrentService, transaction_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The transaction's results: its order's (`GET /v3/order/{id}/result`)."""
    return orders.order_results(service, transaction_id, caller, as_of)


@router.get(
    "/v3/order_transaction/{transaction_id:uuid}/result/pdf",
    response_class=Response,
    dependencies=[TEAM_READ_REFUSES_AS_OF],
    responses={
        200: {"content": {"application/pdf": {}}, "description": "The report, a PDF."},
        **error_responses(401, 404, 409, 422, described={**_NOT_FOUND, 409: "No results yet."}),
    },
)
def get_transaction_result_pdf(
    service: CurrentService, transaction_id: UUID, caller: TeamApiCaller
) -> Any:
    """The transaction's result report: its order's (`GET /v3/order/{id}/result/pdf`)."""
    return lab_documents.result_pdf(service, transaction_id, caller)
