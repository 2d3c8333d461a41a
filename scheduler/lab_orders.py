"""The simulated lab's sweep: take every due sandbox order one step on, and cancel the open
orders of users deleted meanwhile. It selects its work from our own tables and records
each step through the event store's optimistic concurrency, so a missed or doubled
wake-up, or a second process doing the same, changes nothing."""

from __future__ import annotations

from healthledger.domain.labs.ordering import LabOrders
from healthledger.domain.labs.orders import Order

# Orders per query; the sweep goes on batch after batch while batches come back full, up
# to MAX_BATCHES per wake-up (the next wake-up goes on from there).
BATCH = 200
MAX_BATCHES = 100


def makes_an_order_step_due(event: object) -> bool:
    """Whether a committed event makes a sandbox order's next step due at once (a delay of
    zero, as tests and benchmarks configure), so the sweep should run now rather than at
    its next interval."""
    if isinstance(event, Order.Created | Order.StatusChanged | Order.ActivationRescheduled):
        due = event.next_step_at
        return due is not None and due <= event.timestamp
    return False


def progress_lab_orders(orders: LabOrders) -> int:
    """Take the due orders on; how many were looked at."""
    total = 0
    for _ in range(MAX_BATCHES):
        looked_at = orders.progress_due(BATCH)
        total += looked_at
        if looked_at < BATCH:
            break
    return total
