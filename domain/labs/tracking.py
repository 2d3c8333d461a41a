"""An order's tracking (the official client's `get_order_tracking`): when its results are
expected, when its sample was collected, and one update of that estimate per change of
the order, all read from the order's own history (`Order.changes`), nothing stored apart.

The estimate is the simulated lab's: the steps still to come, each at its delay
(`sandbox.results_due`), from the time the next one is due. A lab's failures and
cancellations are not foreseen (a lab does not know them ahead either); an order that
ends so has no current estimate. A production order moves as its lab reports, whose
times we are not told ahead: no estimate, until its results come.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from healthledger.domain.labs.appointments import ORDER_CANCELLED, ORDER_SCHEDULED
from healthledger.domain.labs.orders import (
    CANCELLED,
    COMPLETED,
    FAILED,
    SAMPLE_WITH_LAB,
    SANDBOX_LAB,
    Order,
    OrderChange,
    low_level,
    top_level,
)
from healthledger.domain.labs.sandbox import SandboxPolicy, results_due

# Who moved an estimate (the client's EtaUpdateSource): the lab's own steps; the patient's
# appointment being booked or cancelled; anything else done here (placing, the team's
# changes through this API, a cancellation by the user's deletion).
LAB = "lab"
PATIENT = "patient"
PLATFORM = "junction"
# How a collection time not reported as such is inferred (CollectionInferenceSource).
LAB_ARRIVAL = "lab_arrival"
SCHEDULED_APPOINTMENT = "scheduled_appointment"
# A draw reported when it is done: by the phlebotomist at home, or by the team on site.
_DRAWN = "draw_completed"


@dataclass(frozen=True)
class Collection:
    """When the sample was collected: reported (a draw), or inferred from its arrival at
    the lab or from the appointment it was drawn at (`inferred_from`)."""

    collected_at: datetime
    is_inferred: bool
    inferred_from: str | None


@dataclass(frozen=True)
class Estimate:
    """When the results were first expected (at the order's placing) and are now."""

    original: datetime | None
    current: datetime | None


def estimate_after(order: Order, change: OrderChange, policy: SandboxPolicy) -> datetime | None:
    """The results' time as the order stood after `change`."""
    return results_expected(
        order.collection_method, change.status, change.at, change.next_step_at, policy
    )


def results_expected(
    method: str,
    status: str,
    at: datetime,
    next_step_at: datetime | None,
    policy: SandboxPolicy,
    *,
    lag: timedelta = timedelta(0),
) -> datetime | None:
    """The results' time of an order of `method` in `status` (taken at `at`) whose
    simulated lab's next step is due at `next_step_at`: when they came for its completion,
    none once it is cancelled or failed, else the sandbox's estimate (`lag`: each step to
    come that late, `sandbox.results_due`)."""
    top = top_level(status)
    if top == COMPLETED:
        return at
    if top in (CANCELLED, FAILED):
        return None
    return results_due(method, status, next_step_at, policy, lag=lag)


def results_estimate(order: Order, policy: SandboxPolicy) -> Estimate:
    return Estimate(
        original=estimate_after(order, order.changes[0], policy),
        current=estimate_after(order, order.changes[-1], policy),
    )


def collection_of(order: Order) -> Collection | None:
    """When the order's sample was collected (None: not yet, or never): a reported draw's
    time; else its arrival at the lab, or the booked appointment it was drawn at when one
    led to the arrival."""
    statuses = [change for change in order.changes if not change.activation]
    for change in statuses:
        if low_level(change.status) == _DRAWN:
            return Collection(change.at, is_inferred=False, inferred_from=None)
    for before, change in zip([None, *statuses], statuses, strict=False):
        if top_level(change.status) != SAMPLE_WITH_LAB:
            continue
        if before is not None and low_level(before.status) == ORDER_SCHEDULED:
            booked = before.next_step_at or change.at
            return Collection(booked, is_inferred=True, inferred_from=SCHEDULED_APPOINTMENT)
        return Collection(change.at, is_inferred=True, inferred_from=LAB_ARRIVAL)
    return None


def source_of(change: OrderChange) -> str:
    """Who moved the estimate with `change` (the client's EtaUpdateSource)."""
    if change.actor == SANDBOX_LAB:
        return LAB
    if not change.activation and low_level(change.status) in (ORDER_SCHEDULED, ORDER_CANCELLED):
        return PATIENT
    return PLATFORM
