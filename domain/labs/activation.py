"""Activation dates of lab test orders (the official client's `activate_by`): an order may
be placed to be dispatched to the lab on a later day. It waits in `ordered` until then;
the team may move the day, or clear it to dispatch the order now (`PATCH /v3/order/{id}`,
`Order.ActivationRescheduled`). ADR 0041.

Days are UTC days: the order is dispatched at the start (00:00 UTC) of its day. Nothing
polls for the day to come: a sandbox order's first step is simply due then
(`next_step_at`), and the simulated lab's sweep, woken by the scheduler, takes it as it
takes every due step. A production order is moved only as its lab reports, with or
without a date.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from healthledger.domain.labs.orders import OrderNotSchedulable
from healthledger.domain.labs.sandbox import SandboxPolicy

# How far ahead an order may be scheduled: a lab's requisition is not held longer than a
# year, and a bound keeps every estimate computed from the date within the calendar.
MAX_DAYS_AHEAD = 365


def check_activation_date(activate_by: date, now: datetime) -> None:
    """Refuse (OrderNotSchedulable, 400) a day before today (UTC) or beyond a year ahead."""
    today = now.astimezone(UTC).date()
    if activate_by < today:
        raise OrderNotSchedulable(
            f"activate_by {activate_by.isoformat()} is in the past: give today "
            f"({today.isoformat()}) or a later day (UTC), or null to dispatch the order now."
        )
    if activate_by > today + timedelta(days=MAX_DAYS_AHEAD):
        raise OrderNotSchedulable(
            f"activate_by may be at most {MAX_DAYS_AHEAD} days ahead (until "
            f"{(today + timedelta(days=MAX_DAYS_AHEAD)).isoformat()})."
        )


def dispatched_at(activate_by: date) -> datetime:
    """The instant an order of that day is dispatched: the day's start, UTC."""
    return datetime.combine(activate_by, time.min, UTC)


def first_step_due(activate_by: date | None, now: datetime, policy: SandboxPolicy) -> datetime:
    """When the simulated lab takes a sandbox order's first step: its usual delay after
    `now`, and not before the order's activation day."""
    due = now + policy.delay(1)
    return due if activate_by is None else max(due, dispatched_at(activate_by))
