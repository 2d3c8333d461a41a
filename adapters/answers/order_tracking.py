"""What `GET /v3/order/{id}/tracking` answers: the official client's `OrderTracking`, from
the order aggregate (now, or as it was for `as_of`): its results' estimate, its sample's
collection, each marker's state and one update per change (`domain/labs/tracking.py`).

The markers come from the test ordered, sealed with the user's key: opened with the vault
given (a past answer about a user erased since has none to show). A completed order's
markers list the results reported for them, by name only (the values are the results'
answer's).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from healthledger.adapters.answers.orders import OpensSealed
from healthledger.domain.instants import as_utc
from healthledger.domain.labs.catalog import LabCatalog, Marker
from healthledger.domain.labs.orders import CANCELLED, COMPLETED, FAILED, Order, OrderChange
from healthledger.domain.labs.sandbox import SandboxPolicy
from healthledger.domain.labs.tracking import (
    Estimate,
    collection_of,
    estimate_after,
    results_estimate,
    source_of,
)

# A marker's state (the client's OrderMarkerTrackingStatus): its results reported; still
# to come; or never to come in full (the order cancelled or failed).
PENDING = "pending"
INCOMPLETE = "incomplete"
RESULTED = "resulted"


class OrderTrackingAnswers:
    def __init__(self, catalog: LabCatalog, policy: SandboxPolicy) -> None:
        self.catalog = catalog
        self.policy = policy

    def tracking(self, order: Order, vault: OpensSealed) -> dict[str, Any]:
        """OrderTracking of `order`, its sealed values opened with `vault`."""
        estimate = results_estimate(order, self.policy)
        test = order.ordered_test(vault.open)
        ids = () if test is None else test.marker_ids
        markers = [m for m in map(self.catalog.marker, ids) if m is not None]
        reported = self._reported(order, vault)
        collection = collection_of(order)
        return {
            "order_id": str(order.id),
            "expected_at": {"final_results": _estimate(estimate)},
            "collected_at": None
            if collection is None
            else {
                "collected_at": as_utc(collection.collected_at),
                "is_inferred": collection.is_inferred,
                "inferred_from": collection.inferred_from,
            },
            "markers": [self._marker(order, m, estimate, reported) for m in markers],
            "updates": [
                self._update(order, change, estimate, markers) for change in order.changes[1:]
            ],
        }

    def _marker(
        self,
        order: Order,
        marker: Marker,
        estimate: Estimate,
        reported: list[dict[str, Any]],
    ) -> dict[str, Any]:
        results = [
            {
                "id": value["expected_result_id"],
                "name": value["name"],
                "slug": value["slug"],
                "provider_id": value["provider_id"],
            }
            for value in reported
            if value.get("marker_id") == marker.id
        ]
        top = order.top_level_status
        status = (
            RESULTED if top == COMPLETED else INCOMPLETE if top in (CANCELLED, FAILED) else PENDING
        )
        return {
            "id": marker.id,
            "name": marker.name,
            "slug": marker.slug,
            "provider_id": marker.provider_id,
            "status": status,
            "expected_at": _estimate(estimate),
            "results": results,
        }

    def _update(
        self, order: Order, change: OrderChange, estimate: Estimate, markers: list[Marker]
    ) -> dict[str, Any]:
        revised = estimate_after(order, change, self.policy)
        return {
            "created_at": as_utc(change.at),
            "reason": _reason(change),
            "revised_estimate": _instant(revised),
            "impacted_markers": [
                {
                    "id": marker.id,
                    "name": marker.name,
                    "provider_id": marker.provider_id,
                    "estimates": _estimate(Estimate(estimate.original, revised)),
                }
                for marker in markers
            ],
            "source": source_of(change),
        }

    @staticmethod
    def _reported(order: Order, vault: OpensSealed) -> list[dict[str, Any]]:
        """The results reported (stored form), or none: not completed, or erased since."""
        if order.sealed_results is None:
            return []
        opened = vault.open(order.user_id, order.sealed_results)
        return (
            [value for value in opened if isinstance(value, dict)]
            if isinstance(opened, list)
            else []
        )


def _reason(change: OrderChange) -> str:
    if not change.activation:
        return f"status: {change.status}"
    if change.activate_by is None:
        return "activate_by cleared: dispatched to the lab now"
    return f"activate_by: {change.activate_by.isoformat()}"


def _estimate(estimate: Estimate) -> dict[str, Any]:
    return {
        "original_estimate": _instant(estimate.original),
        "current_estimate": _instant(estimate.current),
    }


def _instant(at: datetime | None) -> datetime | None:
    return None if at is None else as_utc(at)
