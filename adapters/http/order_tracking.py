"""`GET /v3/order/{order_id}/tracking` (issue 33; the official client's
`get_order_tracking`): when the order's results are expected, when its sample was
collected, each marker's state and the history of the estimate, rendered from the order's
own history (`adapters/answers/order_tracking.py`), now or `as_of` an instant as the
order's GET. Another team's order, an unknown one, or one of a user erased since: a 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter
from healthledger.adapters.answers.order_tracking import OrderTrackingAnswers
from healthledger.adapters.compliance.time_travel import PlaceholderVault
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.orders import order_as_of
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from pydantic import BaseModel, ConfigDict

_AT = "2026-03-01T12:00:00Z"
_ESTIMATE = {
    "original_estimate": "2026-03-04T14:01:00Z",
    "current_estimate": "2026-03-04T15:30:00Z",
}
_MARKER = {"id": 101, "name": "Hemoglobin A1c", "provider_id": "496"}
TRACKING_EXAMPLE: dict[str, Any] = {
    "order_id": "7d1e9a52-3b4c-4e8f-9a1b-2c3d4e5f6a7b",
    "expected_at": {"final_results": _ESTIMATE},
    "collected_at": {
        "collected_at": "2026-03-02T14:30:00Z",
        "is_inferred": True,
        "inferred_from": "scheduled_appointment",
    },
    "markers": [
        {
            **_MARKER,
            "slug": "hemoglobin-a1c",
            "status": "pending",
            "expected_at": _ESTIMATE,
            "results": [],
        }
    ],
    "updates": [
        {
            "created_at": _AT,
            "reason": "status: received.walk_in_test.requisition_created",
            "revised_estimate": "2026-03-04T14:01:00Z",
            "impacted_markers": [
                {
                    **_MARKER,
                    "estimates": {**_ESTIMATE, "current_estimate": "2026-03-04T14:01:00Z"},
                }
            ],
            "source": "lab",
        }
    ],
}


class TrackingEstimate(BaseModel):
    """When the results were expected at the order's placing, and are now (null: not
    known: a production order's lab gives no time ahead; an order cancelled or failed)."""

    original_estimate: datetime | None
    current_estimate: datetime | None


class TrackingExpectedAt(BaseModel):
    final_results: TrackingEstimate


class TrackingCollection(BaseModel):
    """When the sample was collected: a draw reported as done, or inferred from its
    arrival at the lab or from the appointment booked for it."""

    collected_at: datetime
    is_inferred: bool
    inferred_from: Literal["lab_arrival", "scheduled_appointment"] | None


class TrackingResultMarker(BaseModel):
    """A result reported for the marker (its expected result's id, name...): no value."""

    id: int | None
    name: str
    slug: str
    provider_id: str | None


class TrackingMarker(BaseModel):
    id: int
    name: str
    slug: str
    provider_id: str | None
    status: Literal["pending", "incomplete", "resulted"]
    expected_at: TrackingEstimate
    results: list[TrackingResultMarker]


class TrackingImpactedMarker(BaseModel):
    id: int
    name: str
    provider_id: str | None
    estimates: TrackingEstimate


class TrackingUpdate(BaseModel):
    """One change of the order (a status, or its activation date) and the estimate it
    left; `source`: the lab's own step, the patient's appointment, or this platform (the
    team's requests, a cancellation by the user's deletion)."""

    created_at: datetime
    reason: str
    revised_estimate: datetime | None
    impacted_markers: list[TrackingImpactedMarker]
    source: Literal["lab", "patient", "junction"]


class OrderTrackingAnswer(BaseModel):
    """The client's OrderTracking. `markers` is empty in a past answer about a user erased
    since (the test ordered was sealed with the user's key)."""

    model_config = ConfigDict(json_schema_extra={"examples": [TRACKING_EXAMPLE]})
    order_id: str
    expected_at: TrackingExpectedAt
    collected_at: TrackingCollection | None
    markers: list[TrackingMarker]
    updates: list[TrackingUpdate]


router = APIRouter(tags=["lab orders"], route_class=LedgerRoute)


@router.get(
    "/v3/order/{order_id:uuid}/tracking",
    response_model=OrderTrackingAnswer,
    responses=error_responses(
        401,
        404,
        422,
        described={404: "Unknown order, another team's, or an order of a user erased since."},
    ),
)
def order_tracking(
    service: CurrentService, order_id: UUID, caller: TeamApiCaller, as_of: TeamAsOf
) -> Any:
    """The order's results estimate and its history, its sample's collection and each
    marker's state (with `as_of`: as they were at that instant, from the log)."""
    answers = OrderTrackingAnswers(service.lab_catalog, service.lab_orders.policy)
    if as_of is None:
        order = service.lab_orders.load(caller.team_id, order_id)
        return answers.tracking(order, service.key_store)
    past = order_as_of(service, caller, order_id, as_of)
    return answers.tracking(past, PlaceholderVault(service.key_store))
